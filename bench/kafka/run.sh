#!/usr/bin/env bash
# cardinal reading W1 from Kafka, side by side with what reading alone
# costs, in one run with interleaved rounds. See bench/kafka/README.md.
#
#   bench/kafka/run.sh                       # 10,000,000 events, 2 rounds, every part
#   bench/kafka/run.sh --events 20000000 --rounds 3
#   bench/kafka/run.sh --events 2000000 --parts throughput
#
# The parts (--parts, comma-separated; default all four):
#   throughput  each round: Kafka's ConsumerPerformance, the read floor
#               (examples/kafka_read_floor.rs: the source's own librdkafka
#               batch reads, nothing folded) and a fresh `cardinal serve
#               --kafka` on W1's schema, each draining the whole topic;
#               cardinal's answers checked against `cardinal run` over the
#               same lines and against the generator's truth file
#   growth      a fresh node on a schema grouped by user (~1M groups,
#               bench/engine/schemas/snapshot.sql) drains the topic: the
#               rate of the first million records against the rest; then
#               the same for the engine alone (`cardinal run`)
#   restart     the same schema with --snapshot-every 5: read the topic,
#               wait for a snapshot covering it, kill -9, start again: the
#               seconds to caught up (lag 0) and the snapshot's load time
#   freshness   a fresh node (--snapshot-every 2) while ProducerPerformance
#               writes W1 lines at --rate for --fresh-seconds: the p50 and
#               p99 of cardinal_kafka_freshness_seconds
#
# Flags (environment variables of the same name in capitals work too):
#   --events N          W1 records in the topic                (default 10000000)
#   --partitions P      partitions of the topics               (default 6)
#   --rounds R          interleaved throughput rounds          (default 2)
#   --rate R            freshness: records produced per second (default 100000)
#   --fresh-seconds S   freshness: seconds of producing        (default 10)
#   --parts LIST        which parts                            (default throughput,growth,restart,freshness)
#   --timeout S         bound on one measurement, seconds      (default 300)
#
# Environment: CARDINAL=path/to/cardinal and FLOOR=path/to/kafka_read_floor
# use those binaries instead of building the release-lto ones.
#
# Idempotent: the Kafka jars (cached by .ci/kafka in ~/.cache) and the input
# (bench/.work/kafka/data/) are made only when missing. Every run formats a
# fresh broker on random free ports of 127.0.0.1 (.ci/kafka start), writes
# the topic once, and stops the broker and the nodes and deletes their data
# when it exits, however it exits. Each run writes machine.txt,
# results.jsonl, the tools' raw output, the nodes' logs and table.md to
# bench/.work/kafka/runs/<UTC time>/.
set -euo pipefail

EVENTS="${EVENTS:-10000000}"
PARTITIONS="${PARTITIONS:-6}"
ROUNDS="${ROUNDS:-2}"
RATE="${RATE:-100000}"
FRESH_SECONDS="${FRESH_SECONDS:-10}"
PARTS="${PARTS:-throughput,growth,restart,freshness}"
TIMEOUT="${TIMEOUT:-300}"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --events) EVENTS="$2"; shift 2 ;;
        --partitions) PARTITIONS="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --rate) RATE="$2"; shift 2 ;;
        --fresh-seconds) FRESH_SECONDS="$2"; shift 2 ;;
        --parts) PARTS="$2"; shift 2 ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done
for flag in EVENTS PARTITIONS ROUNDS RATE FRESH_SECONDS TIMEOUT; do
    [[ "${!flag}" =~ ^[1-9][0-9]*$ ]] || { echo "--${flag,,} must be a positive integer" >&2; exit 2; }
done
for part in ${PARTS//,/ }; do
    [[ "$part" =~ ^(throughput|growth|restart|freshness)$ ]] \
        || { echo "--parts: unknown part $part (throughput, growth, restart, freshness)" >&2; exit 2; }
done
want() { [[ ",$PARTS," == *",$1,"* ]]; }

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$root/bench/.work/kafka"
data="$work/data"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
out="$work/runs/$stamp"
scratch="$work/scratch/$stamp"   # the broker's and the nodes' data: deleted on exit
broker_dir="$scratch/broker"
mkdir -p "$data" "$out" "$scratch"
kafka="$root/.ci/kafka"
w1_schema="$root/bench/engine/schemas/impressions.sql"
big_schema="$root/bench/engine/schemas/snapshot.sql"

say() { printf '== %s\n' "$*" >&2; }

# ---- the broker: stopped on exit, and by its watchdog if this script is killed --
# node.py stops its own node however it ends; a node left by a killed
# node.py is found by the pid file beside its data folder in $scratch.
cleanup() {
    for pidfile in "$scratch"/*.pid; do
        [[ -f "$pidfile" ]] || continue
        pid="$(cat "$pidfile")"
        grep -qa -- "$scratch" "/proc/$pid/cmdline" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    done
    "$kafka" stop "$broker_dir" || true
    rm -rf "$scratch"
    rmdir "$work/scratch" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- tools and input ----------------------------------------------------------
jars="$("$kafka" jars)"
tool() { "$kafka" tool "$@"; }
target="${CARGO_TARGET_DIR:-$root/target}"

records="$data/impressions-$EVENTS.csv"   # W1, one record a line, no header
truth="$data/impressions-$EVENTS.truth.json"
# Both in one cargo command: built apart, the two packages unify their
# dependencies' features differently, and each build undoes the other's
# (a full fat-LTO rebuild, ~7 minutes here).
if [[ -z "${CARDINAL:-}" || -z "${FLOOR:-}" ]]; then
    say "building cardinal and the read floor (release-lto)"
    (cd "$root" && cargo build -q --profile release-lto -p cardinal --bin cardinal \
        -p cardinal-server --example kafka_read_floor)
fi
cardinal="${CARDINAL:-$target/release-lto/cardinal}"
floor="${FLOOR:-$target/release-lto/examples/kafka_read_floor}"
if [[ ! -f "$records" ]]; then
    say "generating $EVENTS W1 records"
    "$cardinal" gen impressions --events "$EVENTS" -o "$records.full.tmp" --truth "$truth"
    tail -n +2 "$records.full.tmp" >"$records.tmp"
    rm "$records.full.tmp"
    mv "$records.tmp" "$records"
fi
record_bytes="$(stat -c %s "$records")"
# The answers cardinal must give: `cardinal run` over the same lines.
expect="$data/impressions-$EVENTS.expect.jsonl"
if want throughput && [[ ! -f "$expect" ]]; then
    say "folding the same lines with cardinal run (the expected answers)"
    { "$cardinal" gen impressions --events 1 | sed -n 1p; cat "$records"; } \
        | "$cardinal" run "$w1_schema" - --json "$expect.tmp" >/dev/null
    mv "$expect.tmp" "$expect"
fi
# ProducerPerformance holds its payload file in memory: a million lines.
payload="$data/payload-1000000.csv"
if want freshness && [[ ! -f "$payload" ]]; then
    "$cardinal" gen impressions --events 1000000 --seed 7 | tail -n +2 >"$payload.tmp"
    mv "$payload.tmp" "$payload"
fi

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) online"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "java: $(java -version 2>&1 | head -1)"
    echo "cardinal: $cardinal"
    echo "input: $records ($EVENTS records, $record_bytes bytes)"
    echo "partitions: $PARTITIONS; parts: $PARTS; rounds: $ROUNDS; rate: $RATE/s for $FRESH_SECONDS s"
} >"$out/machine.txt"
results="$out/results.jsonl"
: >"$results"

# ---- broker and topic -----------------------------------------------------------
say "starting a broker"
mkdir -p "$broker_dir"
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


# ---- the read floor: the source's librdkafka batch reads, nothing folded ----------
read_floor_round() { # read_floor_round ROUND
    local round="$1" raw="$out/read-floor-r$1.txt"
    FLOOR_BATCH=1 timeout --foreground "$TIMEOUT" "$floor" "$bootstrap" "$topic" "$EVENTS" >"$raw" 2>&1 \
        || { say "kafka_read_floor failed:"; tail -20 "$raw" >&2; exit 1; }
    python3 - "$raw" "$round" >>"$results" <<'EOF'
import json, re, sys
f = dict(re.findall(r"(\w+)=(\S+)", open(sys.argv[1]).read()))
print(json.dumps({"system": "kafka_read_floor", "round": int(sys.argv[2]),
    "records": int(f["messages"]), "seconds": float(f["seconds"]),
    "records_per_s": float(f["messages_per_s"])}))
EOF
    tail -1 "$results" | python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("   read floor %9.0f records/s (first message to last)" % r["records_per_s"])' >&2
}

# ---- cardinal: a fresh `cardinal serve --kafka` draining the topic ----------------
node() { # node PART ARGS...: node.py with the common arguments
    local part="$1"; shift
    python3 "$here/node.py" "$part" --cardinal "$cardinal" --brokers "$bootstrap" \
        --scratch "$scratch" --timeout "$TIMEOUT" "$@"
}

cardinal_round() { # cardinal_round ROUND
    local round="$1"
    node throughput --schema "$w1_schema" --topic "$topic" --records "$EVENTS" --round "$round" \
        --label "cardinal-r$round" --log "$out/cardinal-r$round.log" --polls "$out/cardinal-r$round-polls.tsv" \
        --expect "$expect" --truth "$truth" >>"$results" \
        || { say "cardinal failed; its log:"; tail -20 "$out/cardinal-r$round.log" >&2; exit 1; }
    tail -1 "$results" | python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("   cardinal   %9.0f records/s (first message to folded; %.0f over the whole run)  %.2f CPU-s  %.0f records/CPU-s  RSS %.0f MB\n              %s" % (r["records_per_s"], r["whole_run_records_per_s"], r["cpu_s"], r["records_per_cpu_s"], r["rss_mb"], r["check"]))' >&2
    tail -1 "$results" | grep -q '"agree": true' || { say "cardinal's answers are wrong"; exit 1; }
}

if want throughput; then
    for round in $(seq "$ROUNDS"); do
        say "round $round"
        floor_round "$round"
        read_floor_round "$round"
        cardinal_round "$round"
    done
fi

if want growth; then
    say "growth: a fresh node grouping by user (~1M groups) drains $EVENTS records"
    node throughput --schema "$big_schema" --topic "$topic" --records "$EVENTS" --round 1 \
        --label growth --log "$out/growth.log" --polls "$out/growth-polls.tsv" --poll 0.5 \
        | python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); r["system"] = "cardinal-growth"; print(json.dumps(r))' \
        >>"$results" || { say "the growth run failed; its log:"; tail -20 "$out/growth.log" >&2; exit 1; }
    tail -1 "$results" | python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); f, a = r["first_window_records_per_s"], r["after_first_window_records_per_s"]; print("   first 1M %9.0f records/s, the other %d M %9.0f (%.2fx); overall %.0f; RSS %.0f MB\n   each million: %s" % (f, (r["records"] - 1000000) // 1000000, a, a / f, r["records_per_s"], r["rss_mb"], r["window_records_per_s"]))' >&2
    # The engine alone, no Kafka and no /metrics views: `cardinal run` over
    # the first million lines, then over all of them; the difference is
    # the fold of the records after the first million.
    header="$("$cardinal" gen impressions --events 1 | sed -n 1p)"
    fold_seconds() { # fold_seconds LINES: cardinal run's own time for the first LINES records
        { echo "$header"; head -n "$1" "$records"; } \
            | "$cardinal" run "$big_schema" - --json "$out/growth-fold.jsonl" 2>&1 \
            | sed -n 's/.* in \([0-9.]*\) s: .*/\1/p'
    }
    small="$(fold_seconds 1000000)" whole="$(fold_seconds "$EVENTS")"
    python3 -c 'import json, sys; s, w, n = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]); print(json.dumps({"system": "engine-growth", "first_million_s": s, "all_s": w, "records": n, "first_million_records_per_s": 1e6 / s, "after_records_per_s": (n - 1e6) / (w - s) if w > s else None}))' \
        "$small" "$whole" "$EVENTS" >>"$results"
    tail -1 "$results" | python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("   the engine alone (cardinal run): the first 1M %.0f records/s, the rest %.0f" % (r["first_million_records_per_s"], r["after_records_per_s"] or 0))' >&2
fi

if want restart; then
    say "restart: read $EVENTS records grouped by user, snapshot, kill -9, start again"
    node restart --schema "$big_schema" --topic "$topic" --records "$EVENTS" --snapshot-every 5 \
        --log "$out/restart.log" >>"$results" \
        || { say "the restart run failed; its log:"; tail -20 "$out/restart.log" >&2; exit 1; }
    tail -1 "$results" | python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("   snapshot %.0f MB (RSS %.0f MB); restart to /metrics %.2f s, to caught up %.2f s, to lag 0 %.2f s; snapshot load %s s; %d records read again" % (r["snapshot_mb"], r["rss_mb_before_kill"], r["restart_to_http_s"], r["restart_to_caught_up_s"], r["restart_to_lag0_s"], r["load_s"], r["reread_records"]))' >&2
fi

if want freshness; then
    fresh_topic="fresh"
    fresh_records=$((RATE * FRESH_SECONDS))
    tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --create \
        --topic "$fresh_topic" --partitions "$PARTITIONS" --replication-factor 1 >/dev/null
    say "freshness: $fresh_records records at $RATE/s into $fresh_topic, a node with --snapshot-every 2"
    node freshness --schema "$w1_schema" --topic "$fresh_topic" --records "$fresh_records" \
        --extra=--snapshot-every --extra=2 --log "$out/freshness.log" \
        --producer-log "$out/freshness-producer.txt" -- \
        java -Xmx1g -cp "$jars/*" org.apache.kafka.tools.ProducerPerformance \
        --bootstrap-server "$bootstrap" --topic "$fresh_topic" --num-records "$fresh_records" \
        --throughput "$RATE" --payload-file "$payload" --command-property acks=all \
        >>"$results" || { say "the freshness run failed; its log:"; tail -20 "$out/freshness.log" >&2; exit 1; }
    tail -1 "$results" | python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("   %d batches: p50 <= %g s, p99 <= %g s, all <= %g s (bucket bounds), mean %.3f s" % (r["batches"], r["p50_le_s"], r["p99_le_s"], r["max_le_s"], r["mean_s"]))' >&2
fi

# ---- table ------------------------------------------------------------------------
python3 "$here/table.py" "$results" "$EVENTS" "$PARTITIONS" "$RATE" >"$out/table.md"
cat "$out/table.md"
say "results in ${out#"$root"/}"
