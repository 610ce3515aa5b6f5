#!/usr/bin/env bash
# Over-load of `cardinal serve` over HTTP (issue 38, "Speed"): the
# sustainable rate first (crates/server/examples/load.rs, --rate 0), then
# twice that rate offered for a minute by many connections, with the
# server's RSS sampled every second. Reports RSS in the first and last
# third, 503 answers, acknowledged events, and that nothing was lost: every
# posted batch acknowledged in the end (503s are retried with the same
# Idempotency-Key) and the server's accepted count equal to the events
# acknowledged. See bench/serve/README.md.
#
#   bench/serve/overload.sh                          # 60 s at 2x, 64 connections
#   bench/serve/overload.sh --seconds 20 --connections 16
#
# Flags (environment variables of the same name in capitals work too):
#   --events N         W1 records in the input file (cycled)  (default 5000000)
#   --probe-seconds S  seconds of the sustainable-rate probe  (default 20)
#   --seconds S        seconds of over-load                   (default 60)
#   --factor F         offered rate over the sustainable one  (default 2)
#   --connections C    connections of the over-load           (default 64)
#   --batch-kib K      body size                              (default 1024)
#
# Environment: CARDINAL=path/to/cardinal and LOAD=path/to/load use those
# builds instead of building the release-lto ones. Writes probe.json,
# overload.json, the progress lines, /metrics and table.md to
# bench/.work/serve/runs/overload-<UTC time>/.
set -euo pipefail

EVENTS="${EVENTS:-5000000}"
PROBE_SECONDS="${PROBE_SECONDS:-20}"
SECONDS_="${SECONDS_:-60}"
FACTOR="${FACTOR:-2}"
CONNECTIONS="${CONNECTIONS:-64}"
BATCH_KIB="${BATCH_KIB:-1024}"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --events) EVENTS="$2"; shift 2 ;;
        --probe-seconds) PROBE_SECONDS="$2"; shift 2 ;;
        --seconds) SECONDS_="$2"; shift 2 ;;
        --factor) FACTOR="$2"; shift 2 ;;
        --connections) CONNECTIONS="$2"; shift 2 ;;
        --batch-kib) BATCH_KIB="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done
for v in EVENTS PROBE_SECONDS SECONDS_ CONNECTIONS BATCH_KIB; do
    [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "${v%_} must be a positive integer" >&2; exit 2; }
done
[[ "$FACTOR" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "--factor must be a number" >&2; exit 2; }

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$root/bench/.work/serve"
data="$work/data"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
out="$work/runs/overload-$stamp"
scratch="$work/scratch/overload-$stamp"   # the servers' data: deleted on exit
mkdir -p "$data" "$out" "$scratch"

say() { printf '== %s\n' "$*" >&2; }

pids=()
cleanup() {
    local pid
    for pid in "${pids[@]}"; do
        kill -0 "$pid" 2>/dev/null || continue
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$scratch"
    rmdir "$work/scratch" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_ports() { # free_ports N: N distinct free TCP ports of 127.0.0.1, one a line
    python3 - "$1" <<'EOF'
import random, socket, sys
found = set()
while len(found) < int(sys.argv[1]):
    port = random.randint(20000, 60999)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    found.add(port)
print("\n".join(map(str, sorted(found))))
EOF
}

if [[ -n "${CARDINAL:-}" ]]; then
    cardinal="$CARDINAL"
else
    say "building cardinal (release-lto)"
    (cd "$root" && cargo build -q --profile release-lto -p cardinal --bin cardinal)
    cardinal="${CARGO_TARGET_DIR:-$root/target}/release-lto/cardinal"
fi
if [[ -n "${LOAD:-}" ]]; then
    load="$LOAD"
else
    say "building the load example (release-lto)"
    (cd "$root" && cargo build -q --profile release-lto -p cardinal-server --example load)
    load="${CARGO_TARGET_DIR:-$root/target}/release-lto/examples/load"
fi

# The input: W1's records without a header, as peers.sh makes them (the
# load example drops the first line as a header: one record of the file
# is never sent).
records="$data/impressions-$EVENTS.csv"
if [[ ! -f "$records" ]]; then
    say "generating $EVENTS W1 records"
    "$cardinal" gen impressions --events "$EVENTS" -o "$records.full.tmp"
    tail -n +2 "$records.full.tmp" >"$records.tmp"
    rm "$records.full.tmp"
    mv "$records.tmp" "$records"
fi

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) online"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/machine.txt"

schema="$root/bench/engine/schemas/impressions.sql"
start_server() { # start_server NAME: a fresh server; sets pid and http
    local name="$1"
    mapfile -t ports < <(free_ports 2)
    http="${ports[1]}"
    "$cardinal" serve "$schema" --listen "127.0.0.1:${ports[0]}" --http "127.0.0.1:$http" \
        --data "$scratch/$name" >"$out/$name.server.txt" 2>&1 &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 300); do   # at most 30 s
        curl -sf "http://127.0.0.1:$http/healthz" >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    say "cardinal serve did not become ready within 30 s"
    tail -20 "$out/$name.server.txt" >&2
    exit 1
}
stop_server() { # stop_server NAME: /metrics saved, SIGTERM, exit status 0 required
    local name="$1" rc=0
    curl -sf "http://127.0.0.1:$http/metrics" >"$out/$name.metrics"
    grep -E '^VmHWM' "/proc/$pid/status" | awk '{ print $2 }' >"$out/$name.hwm_kib"
    kill -TERM "$pid"
    for _ in $(seq 1200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { say "cardinal serve did not exit within 120 s of SIGTERM"; exit 1; }
    wait "$pid" || rc=$?
    [[ $rc == 0 ]] || { say "cardinal serve exited with status $rc after SIGTERM"; exit 1; }
    rm -rf "${scratch:?}/$name"
}

say "probe: as fast as 4 connections go, $PROBE_SECONDS s"
start_server probe
"$load" --http "127.0.0.1:$http" --stream impressions --input "$records" --rate 0 \
    --connections 4 --batch-kib "$BATCH_KIB" --seconds "$PROBE_SECONDS" --pid "$pid" \
    >"$out/probe.json" 2>"$out/probe.progress"
stop_server probe
sustainable="$(python3 -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["events_per_s"]))' "$out/probe.json")"
offered="$(python3 -c "print(round($sustainable * $FACTOR))")"
say "sustainable: $sustainable events/s; offering $offered events/s for $SECONDS_ s on $CONNECTIONS connections"

start_server overload
"$load" --http "127.0.0.1:$http" --stream impressions --input "$records" --rate "$offered" \
    --connections "$CONNECTIONS" --batch-kib "$BATCH_KIB" --seconds "$SECONDS_" --pid "$pid" \
    >"$out/overload.json" 2>"$out/overload.progress"
stop_server overload
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

python3 - "$out" "$FACTOR" <<'EOF' | tee "$out/table.md"
import json, re, sys
out, factor = sys.argv[1], float(sys.argv[2])
machine = dict(l.rstrip("\n").split(": ", 1) for l in open(f"{out}/machine.txt") if ": " in l)
def metric(name, which):
    text = open(f"{out}/{which}.metrics").read()
    return sum(float(v) for v in re.findall(r"^" + name + r"(?:\{[^}]*\})? ([0-9.eE+-]+)$", text, re.M))
probe = json.load(open(f"{out}/probe.json"))
over = json.load(open(f"{out}/overload.json"))
rss = [int(m.group(1)) for m in re.finditer(r"rss (\d+) MiB", open(f"{out}/overload.progress").read())]
failures = []
for name, r in (("probe", probe), ("overload", over)):
    accepted = metric("cardinal_events_accepted_total", name)
    if r["batches_posted"] != r["batches"] or r["failed_posts"]:
        failures.append(f"{name}: {r['batches']} of {r['batches_posted']} batches acknowledged, {r['failed_posts']} failed posts")
    if accepted != r["events"]:
        failures.append(f"{name}: the server accepted {accepted:.0f}, the client was acknowledged {r['events']}")
    r["accepted_metric"] = accepted
    r["refused_full"] = metric("cardinal_batches_refused_full_total", name)
    # Every 503 the edge answered: its in-flight bound's and a full
    # engine queue's (cardinal_batches_refused_full_total) together.
    r["http_busy"] = metric("cardinal_http_busy_total", name)
    r["hwm_mib"] = int(open(f"{out}/{name}.hwm_kib").read() or 0) // 1024
print(f"Over-load, {machine['date']} at {machine['commit']}; load {machine['load at start']} at start, "
      f"{machine.get('load at end')} at end")
print()
print("| run | offered events/s | connections | acked events/s | acked events | batches posted / acked | 503s (server: edge + engine full) | p50 / p99 ms (client, with retries) | RSS MiB first / last third (max) | peak RSS MiB |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for name, r in (("sustainable (rate 0)", probe), (f"{factor:g}x for {over['wall_s']:.0f} s", over)):
    offered = "as fast as it goes" if r["rate_offered"] == 0 else f"{r['rate_offered']:,.0f}"
    print(f"| {name} | {offered} | {r['connections']} | {r['events_per_s']:,.0f} | {r['events']:,} | "
          f"{r['batches_posted']:,} / {r['batches']:,} | {r['http_503']:,} ({r['http_busy'] - r['refused_full']:,.0f} + {r['refused_full']:,.0f}) | "
          f"{r['p50_ms']:.0f} / {r['p99_ms']:.0f} | {r['rss_mib_first_third_max']} / {r['rss_mib_last_third_max']} | {r['hwm_mib']} |")
print()
if rss:
    print(f"RSS each second of the over-load (MiB): min {min(rss)}, max {max(rss)}, last {rss[-1]}")
print("no loss: " + ("every posted batch acknowledged, and the server's accepted count equals the acknowledged events"
                     if not failures else "FAILED: " + "; ".join(failures)))
if failures:
    sys.exit(1)
EOF
say "results in ${out#"$root"/}"
