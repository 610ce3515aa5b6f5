#!/usr/bin/env bash
# Syslog in: rsyslog -> cardinal over RELP into W1's summaries, against
# rsyslog alone writing the same messages to a file (omfile), in one run.
# See bench/README.md, "Syslog in".
#
#   bench/syslog/run.sh                      # 1,000,000 events, window 1024
#   bench/syslog/run.sh --events 200000 --window 128
#
# What it does: generates W1 impressions (`cardinal gen impressions`, kept
# in bench/.work/syslog/data/), then for each of the two pipelines starts
# a fresh rsyslogd (its own work directory) whose imfile reads the file
# and renders each line as RFC 5424 with the line's offset in MSGID (the
# template docs/syslog.md ships), and times from rsyslog's start until:
#   omfile   the output file holds every message (rsyslog alone);
#   relp     cardinal serve --relp --syslog-id msgid has folded every
#            event (cardinal_events_accepted_total), each acknowledged
#            only after the write-ahead log's sync.
# CPU seconds are read from /proc for both processes. The ratio is relp's
# events/s over omfile's: cardinal must not be the bottleneck (>= 0.9).
#
# Flags (environment variables of the same name in capitals work too):
#   --events N    generated impressions                 (default 1000000)
#   --window N    omrelp's windowSize (at most 1024)     (default 1024)
#   --runs N      runs of each pipeline, best kept       (default 3)
#
# Environment: CARDINAL=path/to/cardinal uses that build instead of
# building the release-lto one; RSYSLOGD (default /usr/sbin/rsyslogd).
# Writes machine.txt, results.txt and the logs to
# bench/.work/syslog/runs/<UTC time>/.
set -euo pipefail

EVENTS="${EVENTS:-1000000}"
WINDOW="${WINDOW:-1024}"
RUNS="${RUNS:-3}"
while [ $# -gt 0 ]; do
    case "$1" in
        --events) EVENTS="$2"; shift 2 ;;
        --window) WINDOW="$2"; shift 2 ;;
        --runs) RUNS="$2"; shift 2 ;;
        *) echo "unknown flag $1" >&2; exit 2 ;;
    esac
done
RSYSLOGD="${RSYSLOGD:-/usr/sbin/rsyslogd}"
[ -x "$RSYSLOGD" ] || { echo "no rsyslogd: apt-get install rsyslog rsyslog-relp" >&2; exit 1; }

root="$(cd "$(dirname "$0")/../.." && pwd)"
work="$root/bench/.work/syslog"
run_dir="$work/runs/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$work/data" "$run_dir"
if [ -z "${CARDINAL:-}" ]; then
    (cd "$root" && cargo build -q --profile release-lto -p cardinal)
    CARDINAL="${CARGO_TARGET_DIR:-$root/target}/release-lto/cardinal"
fi
events="$work/data/w1-$EVENTS.csv"
if [ ! -s "$events" ]; then
    "$CARDINAL" gen impressions --events "$EVENTS" --seed 1 -o "$events.tmp"
    tail -n +2 "$events.tmp" > "$events" && rm "$events.tmp"
fi
{
    echo "date: $(date -u +%FT%TZ)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs) x $(nproc)"
    echo "rsyslog: $("$RSYSLOGD" -v | head -1)"
    echo "cardinal: $(cd "$root" && git rev-parse --short HEAD)"
    echo "events: $EVENTS ($(stat -c %s "$events") bytes), omrelp windowSize $WINDOW"
} > "$run_dir/machine.txt"
cat "$run_dir/machine.txt"

pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_secs() { awk -v hz="$(getconf CLK_TCK)" '{print ($14+$15)/hz}' "/proc/$1/stat"; }
now() { date +%s.%N; }

# The rsyslog configuration: docs/syslog.md's template; $1 the action.
config() {
    cat <<EOF
global(workDirectory="$2" maxMessageSize="64k")
module(load="imfile" mode="inotify")
module(load="omrelp")
template(name="w1" type="string"
         string="<%PRI%>1 %TIMESTAMP:::date-rfc3339% %HOSTNAME% w1 - %\$!metadata!fileoffset% - %msg%")
input(type="imfile" file="$3" tag="w1" addMetadata="on" ruleset="forward")
ruleset(name="forward") {
  $1
}
EOF
}

# The RELP floor's receiver: a second rsyslogd, imrelp to a file.
sink_config() {
    cat <<EOF
global(workDirectory="$1/sink")
module(load="imrelp")
template(name="raw" type="string" string="%rawmsg%")
input(type="imrelp" port="$2" address="127.0.0.1" ruleset="out")
ruleset(name="out") { action(type="omfile" file="$1/out.log" template="raw") }
EOF
}

one_run() { # $1 pipeline, $2 run number; prints "seconds rsyslog_cpu cardinal_cpu"
    local kind="$1" dir="$run_dir/$1-$2"
    mkdir -p "$dir/rs"
    cp "$events" "$dir/feed.csv"
    local action cardinal_pid="" http="" sink_pid=""
    if [ "$kind" = omfile ]; then
        action="action(type=\"omfile\" file=\"$dir/out.log\" template=\"w1\")"
    elif [ "$kind" = relp-rsyslog ]; then
        # rsyslog's own RELP pair: omrelp into a second rsyslogd's imrelp,
        # which writes the messages to a file: the floor of RELP itself.
        local port; port="$(free_port)"
        mkdir -p "$dir/sink"
        sink_config "$dir" "$port" > "$dir/sink.conf"
        "$RSYSLOGD" -n -f "$dir/sink.conf" -i "$dir/sink.pid" > "$dir/sink.log" 2>&1 &
        sink_pid=$!; pids+=("$sink_pid")
        until [ -f "$dir/sink.pid" ]; do sleep 0.05; done
        sleep 0.3
        action="action(type=\"omrelp\" target=\"127.0.0.1\" port=\"$port\" template=\"w1\" windowSize=\"$WINDOW\" queue.type=\"LinkedList\" queue.size=\"100000\" action.resumeRetryCount=\"-1\" action.resumeInterval=\"1\")"
    elif [ "$kind" = tcp ]; then
        local port; port="$(free_port)"; http="$(free_port)"
        cat "$root/bench/engine/schemas/impressions.sql" > "$dir/schema.sql"
        "$CARDINAL" serve "$dir/schema.sql" --data "$dir/data" --listen 127.0.0.1:0 \
            --http "127.0.0.1:$http" --syslog "impressions=127.0.0.1:$port" \
            > "$dir/serve.out" 2> "$dir/serve.log" &
        cardinal_pid=$!; pids+=("$cardinal_pid")
        until grep -q "syslog over TCP" "$dir/serve.out" 2>/dev/null; do sleep 0.05; done
        action="action(type=\"omfwd\" target=\"127.0.0.1\" port=\"$port\" protocol=\"tcp\" TCP_Framing=\"octet-counted\" template=\"w1\" queue.type=\"LinkedList\" queue.size=\"100000\")"
    else
        local port; port="$(free_port)"; http="$(free_port)"
        cat "$root/bench/engine/schemas/impressions.sql" > "$dir/schema.sql"
        "$CARDINAL" serve "$dir/schema.sql" --data "$dir/data" --listen 127.0.0.1:0 \
            --http "127.0.0.1:$http" --relp "impressions=127.0.0.1:$port" --syslog-id msgid \
            > "$dir/serve.out" 2> "$dir/serve.log" &
        cardinal_pid=$!; pids+=("$cardinal_pid")
        until grep -q RELP "$dir/serve.out" 2>/dev/null; do sleep 0.05; done
        action="action(type=\"omrelp\" target=\"127.0.0.1\" port=\"$port\" template=\"w1\" windowSize=\"$WINDOW\" queue.type=\"LinkedList\" queue.size=\"100000\" queue.filename=\"relp\" queue.saveOnShutdown=\"on\" action.resumeRetryCount=\"-1\" action.resumeInterval=\"1\")"
    fi
    config "$action" "$dir/rs" "$dir/feed.csv" > "$dir/rsyslog.conf"
    local start; start="$(now)"
    "$RSYSLOGD" -n -f "$dir/rsyslog.conf" -i "$dir/rsyslog.pid" > "$dir/rsyslog.log" 2>&1 &
    local rs=$!; pids+=("$rs")
    local deadline=$(( $(date +%s) + 600 ))
    if [ "$kind" = omfile ] || [ "$kind" = relp-rsyslog ]; then
        # omfile writes whole lines; the template has no newline, so count
        # messages by their header.
        until [ -f "$dir/out.log" ] && [ "$(grep -o '<133>1 ' "$dir/out.log" | wc -l)" -ge "$EVENTS" ]; do
            [ "$(date +%s)" -lt "$deadline" ] || { echo "omfile: timed out" >&2; exit 1; }
            kill -0 "$rs" 2>/dev/null || { echo "rsyslogd exited:" >&2; cat "$dir/rsyslog.log" >&2; exit 1; }
            sleep 0.05
        done
    else
        until [ "$(curl -s "http://127.0.0.1:$http/metrics" | awk '/^cardinal_events_accepted_total/ {print $2}')" = "$EVENTS" ]; do
            [ "$(date +%s)" -lt "$deadline" ] || { echo "relp: timed out" >&2; exit 1; }
            kill -0 "$rs" 2>/dev/null || { echo "rsyslogd exited:" >&2; cat "$dir/rsyslog.log" >&2; exit 1; }
            sleep 0.05
        done
    fi
    local end; end="$(now)"
    local rs_cpu card_cpu=0
    rs_cpu="$(cpu_secs "$rs")"
    [ -n "$cardinal_pid" ] && card_cpu="$(cpu_secs "$cardinal_pid")"
    if [ -n "$sink_pid" ]; then
        card_cpu="$(cpu_secs "$sink_pid")"
        kill "$sink_pid" 2>/dev/null || true
        wait "$sink_pid" 2>/dev/null || true
    fi
    kill "$rs" 2>/dev/null || true
    [ -n "$cardinal_pid" ] && kill "$cardinal_pid" 2>/dev/null || true
    wait "$rs" 2>/dev/null || true
    [ -n "$cardinal_pid" ] && { wait "$cardinal_pid" 2>/dev/null || true; }
    rm -rf "$dir/feed.csv" "$dir/out.log" "$dir/data" "$dir/rs"
    echo "$(echo "$end - $start" | bc -l) $rs_cpu $card_cpu"
}

best() { sort -n | head -1; }
for kind in omfile relp-rsyslog tcp relp; do
    : > "$run_dir/$kind.txt"
    for r in $(seq 1 "$RUNS"); do
        one_run "$kind" "$r" | tee -a "$run_dir/$kind.txt"
    done
done
python3 - "$EVENTS" "$run_dir" <<'EOF' | tee "$run_dir/results.txt"
import sys
n, run_dir = int(sys.argv[1]), sys.argv[2]
def best(kind):
    rows = [list(map(float, l.split())) for l in open(f"{run_dir}/{kind}.txt") if l.strip()]
    return min(rows)
names = {
    "omfile": "rsyslog -> omfile (rsyslog alone)",
    "relp-rsyslog": "rsyslog -> RELP -> rsyslog imrelp -> omfile (RELP's floor)",
    "tcp": "rsyslog -> omfwd octet-counted -> cardinal --syslog",
    "relp": "rsyslog -> RELP -> cardinal --relp --syslog-id msgid",
}
print("| pipeline | wall s | events/s | sender rsyslog CPU-s | receiver CPU-s | receiver CPU-s per 1M |")
print("|---|---|---|---|---|---|")
for kind, name in names.items():
    s, rs, rc = best(kind)
    recv = "-" if kind == "omfile" else f"{rc:.2f}"
    per = "-" if kind == "omfile" else f"{rc / n * 1e6:.2f}"
    print(f"| {name} | {s:.2f} | {n / s:,.0f} | {rs:.2f} | {recv} | {per} |")
of, floor, relp = best("omfile")[0], best("relp-rsyslog")[0], best("relp")[0]
print(f"\nRELP into cardinal / rsyslog alone: {of / relp:.2f}x; / rsyslog's own RELP pair: {floor / relp:.2f}x; AK's Summarizer: 200,000 events/s (v1 CSV)")
EOF
