#!/usr/bin/env bash
# cardinal reading W1 from Kafka, beside the raw read floor: how fast Kafka's
# own consumer (kafka-consumer-perf-test, ConsumerPerformance) drains a
# 6-partition topic of W1's records, one record per message. See
# bench/kafka/README.md.
#
#   bench/kafka/run.sh                       # 2,000,000 events, 1 round
#   bench/kafka/run.sh --events 5000000 --rounds 3
#
# Flags (environment variables of the same name in capitals work too):
#   --events N          W1 records in the topic                (default 2000000)
#   --partitions P      partitions of the topic                (default 6)
#   --rounds R          interleaved rounds, best kept          (default 1)
#   --timeout S         bound on one measurement, seconds      (default 300)
#
# Environment: CARDINAL=path/to/cardinal uses that binary (for `cardinal
# gen` and, later, `cardinal serve`) instead of building the release-lto one.
#
# Idempotent: the Kafka jars (cached by .ci/kafka in ~/.cache) and the input
# (bench/.work/kafka/data/) are made only when missing. Every run formats a
# fresh broker on random free ports of 127.0.0.1 (.ci/kafka start), writes
# the topic once, and stops the broker and deletes its data when it exits,
# however it exits. Each run writes machine.txt, results.jsonl, the tools'
# raw output and table.md to bench/.work/kafka/runs/<UTC time>/.
set -euo pipefail

EVENTS="${EVENTS:-2000000}"
PARTITIONS="${PARTITIONS:-6}"
ROUNDS="${ROUNDS:-1}"
TIMEOUT="${TIMEOUT:-300}"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --events) EVENTS="$2"; shift 2 ;;
        --partitions) PARTITIONS="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done
for flag in EVENTS PARTITIONS ROUNDS TIMEOUT; do
    [[ "${!flag}" =~ ^[1-9][0-9]*$ ]] || { echo "--${flag,,} must be a positive integer" >&2; exit 2; }
done

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$root/bench/.work/kafka"
data="$work/data"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
out="$work/runs/$stamp"
broker_dir="$work/scratch/$stamp"   # the broker's data: deleted on exit
mkdir -p "$data" "$out"
kafka="$root/.ci/kafka"

say() { printf '== %s\n' "$*" >&2; }

# ---- the broker: stopped on exit, and by its watchdog if this script is killed --
cleanup() {
    "$kafka" stop "$broker_dir" || true
    rm -rf "$broker_dir"
    rmdir "$work/scratch" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- tools and input ----------------------------------------------------------
jars="$("$kafka" jars)"
tool() { "$kafka" tool "$@"; }

records="$data/impressions-$EVENTS.csv"   # W1, one record a line, no header
if [[ -n "${CARDINAL:-}" ]]; then
    cardinal="$CARDINAL"
else
    say "building cardinal (release-lto)"
    (cd "$root" && cargo build -q --profile release-lto -p cardinal --bin cardinal)
    cardinal="${CARGO_TARGET_DIR:-$root/target}/release-lto/cardinal"
fi
if [[ ! -f "$records" ]]; then
    say "generating $EVENTS W1 records"
    "$cardinal" gen impressions --events "$EVENTS" -o "$records.full.tmp" \
        --truth "$data/impressions-$EVENTS.truth.json"
    tail -n +2 "$records.full.tmp" >"$records.tmp"
    rm "$records.full.tmp"
    mv "$records.tmp" "$records"
fi
record_bytes="$(stat -c %s "$records")"

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) online"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "java: $(java -version 2>&1 | head -1)"
    echo "input: $records ($EVENTS records, $record_bytes bytes)"
    echo "partitions: $PARTITIONS"
} >"$out/machine.txt"
results="$out/results.jsonl"
: >"$results"

# ---- broker and topic -----------------------------------------------------------
say "starting a broker"
bootstrap="$("$kafka" start "$broker_dir" --owner $$)"
topic="w1"
tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --create \
    --topic "$topic" --partitions "$PARTITIONS" --replication-factor 1 >/dev/null

# W1's lines, one record each, as the values; the key is the line number,
# so the producer's key hash spreads the records evenly over the partitions
# (without keys, the sticky partitioner gave 200,000 records split 23,801
# to 43,517). Idempotent, acks=all, the broker's default flushing (the
# page cache).
say "writing $EVENTS records to $topic ($PARTITIONS partitions)"
produce_started="$(date +%s.%N)"
timeout --foreground "$TIMEOUT" java -Xmx512m -cp "$jars/*" \
    org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$bootstrap" --topic "$topic" \
    --reader-property parse.key=true --reader-property key.separator=$'\t' \
    --command-property batch.size=1048576 --command-property linger.ms=25 \
    --command-property enable.idempotence=true --command-property acks=all \
    --command-property compression.type=none \
    < <(awk '{ print NR "\t" $0 }' "$records") >"$out/produce.txt" 2>&1 \
    || { say "writing the topic failed:"; tail -20 "$out/produce.txt" >&2; exit 1; }
produce_seconds="$(awk -v a="$produce_started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')"
# Every record must be there: the sum of the partitions' high watermarks.
tool org.apache.kafka.tools.GetOffsetShell --bootstrap-server "$bootstrap" --topic "$topic" \
    --time -1 >"$out/offsets.txt"
in_topic="$(awk -F: '{ n += $3 } END { print n + 0 }' "$out/offsets.txt")"
[[ "$in_topic" == "$EVENTS" ]] \
    || { say "the topic holds $in_topic records, not $EVENTS:"; cat "$out/offsets.txt" >&2; exit 1; }
say "wrote $EVENTS records in ${produce_seconds} s; per partition: $(awk -F: '{ printf "%s ", $3 }' "$out/offsets.txt")"

# ---- the floor: Kafka's own consumer reading the whole topic --------------------
floor_round() { # floor_round ROUND
    local round="$1" raw="$out/floor-r$1.txt"
    timeout --foreground "$TIMEOUT" java -Xmx512m -cp "$jars/*" \
        org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "$bootstrap" \
        --topic "$topic" --group "floor-r$round-$stamp" --num-records "$EVENTS" \
        --timeout 60000 --command-property isolation.level=read_committed \
        --command-property auto.offset.reset=earliest >"$raw" 2>&1 \
        || { say "kafka-consumer-perf-test failed:"; tail -20 "$raw" >&2; exit 1; }
    # The last line: start, end, MB, MB/s, records, records/s, rebalance
    # ms, fetch ms, fetch MB/s, fetch records/s.
    python3 - "$raw" "$round" >>"$results" <<'EOF'
import json, sys
lines = [l for l in open(sys.argv[1]) if l[:1].isdigit()]
f = [x.strip() for x in lines[-1].split(",")]
print(json.dumps({"system": "kafka-consumer-perf-test", "round": int(sys.argv[2]),
    "records": int(f[4]), "mb_per_s": float(f[3]), "records_per_s": float(f[5]),
    "fetch_records_per_s": float(f[9]), "rebalance_ms": int(f[6])}))
EOF
    tail -1 "$results" | python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("   floor   %12.0f records/s (%.0f while fetching)  %6.1f MB/s" % (r["records_per_s"], r["fetch_records_per_s"], r["mb_per_s"]))' >&2
}

# ---- cardinal: `cardinal serve` reading the topic ---------------------------------
cardinal_round() { # cardinal_round ROUND
    # ====================================================================
    # TO DO (the Kafka source): start
    #   "$cardinal" serve ... --kafka "$bootstrap" --kafka-topic impressions="$topic"
    # with a fresh data folder, poll its /metrics until
    # cardinal_kafka_lag_records is 0 for every partition (bounded by
    # $TIMEOUT), record the wall time and the process's CPU time, check
    # its answers against $data/impressions-$EVENTS.truth.json, stop it,
    # and append {"system": "cardinal", "round": ..., "records_per_s": ...}
    # to $results. bench/serve/peers.sh shows starting `cardinal serve` on
    # a free port and reading its CPU ticks.
    # ====================================================================
    :
}

for round in $(seq "$ROUNDS"); do
    say "round $round"
    floor_round "$round"
    cardinal_round "$round"
done

# ---- table: the best round of each system ---------------------------------------
python3 - "$results" "$EVENTS" "$PARTITIONS" >"$out/table.md" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
best = {}
for r in rows:
    if r["system"] not in best or r["records_per_s"] > best[r["system"]]["records_per_s"]:
        best[r["system"]] = r
print(f"W1, {int(sys.argv[2]):,} records, one per message, {sys.argv[3]} partitions; best of the rounds.\n")
print("| reader | records/s | records/s while fetching | MB/s |")
print("|---|---:|---:|---:|")
for system, r in best.items():
    mb = f"{r['mb_per_s']:.1f}" if "mb_per_s" in r else ""
    fetching = f"{r['fetch_records_per_s']:,.0f}" if "fetch_records_per_s" in r else ""
    print(f"| {system} | {r['records_per_s']:,.0f} | {fetching} | {mb} |")
EOF
cat "$out/table.md"
say "results in ${out#"$root"/}"
