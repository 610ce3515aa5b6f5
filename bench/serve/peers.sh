#!/usr/bin/env bash
# cardinal's durable ingest (issue 38, "Speed") beside its anchors: `cardinal
# send` into `cardinal serve` (acknowledged after the write-ahead log's group
# commit), a single Kafka broker taking W1's records with acks=all and an
# fsync per batch, and Redis PFADD of W1's user ids, pipelined, without and
# with an fsync per write. Measured side by side in one run; see
# bench/serve/README.md.
#
#   bench/serve/peers.sh                       # 2,000,000 events, 1 round
#   bench/serve/peers.sh --events 5000000 --rounds 3
#   bench/serve/peers.sh --kafka-settings 16384:5,1048576:25 --only kafka
#   bench/serve/peers.sh --only cardinal --cardinal-settings 1024:32 --http-seconds 0
#
# Flags (environment variables of the same name in capitals work too):
#   --events N          W1 records per measurement            (default 2000000)
#   --rounds R          interleaved rounds, best kept         (default 1)
#   --kafka-settings S  producer batch.size:linger.ms pairs, comma-separated
#                       (default 262144:10,1048576:25,4194304:50; the 4.x
#                       default 16384:5 takes minutes for 2M events here)
#   --cardinal-settings S  `cardinal send` --batch-kib:--window pairs,
#                       comma-separated (default 256:8,256:32,1024:8,1024:32)
#   --http-seconds S    seconds of HTTP load (crates/server/examples/load.rs,
#                       4 connections, 1 MiB bodies) per round; 0: none
#                                                             (default 20)
#   --only LIST         kafka, redis, cardinal, comma-separated (default all)
#   --timeout S         bound on one measurement, seconds     (default 240)
#
# Environment: CARDINAL=path/to/cardinal uses that binary (for `cardinal
# gen`, `serve` and `send`) and LOAD=path/to/load that build of the load
# example, instead of building the release-lto ones.
#
# Idempotent: the Kafka jars (Maven, cached by .ci/kafka in ~/.cache),
# redis-server (Debian package), the inputs (bench/.work/serve/data/) are made
# only when missing. Every run formats a fresh broker and starts fresh Redis
# servers on random free ports of 127.0.0.1, and a fresh `cardinal serve` per
# measurement, and stops them and deletes their data when it exits, however
# it exits. Each run writes machine.txt, results.jsonl, the tools' raw output
# and table.md to bench/.work/serve/runs/<UTC time>/.
set -euo pipefail

EVENTS="${EVENTS:-2000000}"
ROUNDS="${ROUNDS:-1}"
KAFKA_SETTINGS="${KAFKA_SETTINGS:-262144:10,1048576:25,4194304:50}"
CARDINAL_SETTINGS="${CARDINAL_SETTINGS:-256:8,256:32,1024:8,1024:32}"
HTTP_SECONDS="${HTTP_SECONDS:-20}"
ONLY="${ONLY:-kafka,redis,cardinal}"
TIMEOUT="${TIMEOUT:-240}"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --events) EVENTS="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --kafka-settings) KAFKA_SETTINGS="$2"; shift 2 ;;
        --cardinal-settings) CARDINAL_SETTINGS="$2"; shift 2 ;;
        --http-seconds) HTTP_SECONDS="$2"; shift 2 ;;
        --only) ONLY="$2"; shift 2 ;;
        --timeout) TIMEOUT="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ "$EVENTS" =~ ^[1-9][0-9]*$ ]] || { echo "--events must be a positive integer" >&2; exit 2; }
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "--rounds must be a positive integer" >&2; exit 2; }
[[ "$HTTP_SECONDS" =~ ^[0-9]+$ ]] || { echo "--http-seconds must be a whole number" >&2; exit 2; }
run_kafka=0; run_redis=0; run_cardinal=0
[[ ",$ONLY," == *,kafka,* ]] && run_kafka=1
[[ ",$ONLY," == *,redis,* ]] && run_redis=1
[[ ",$ONLY," == *,cardinal,* ]] && run_cardinal=1
[[ $run_kafka == 1 || $run_redis == 1 || $run_cardinal == 1 ]] \
    || { echo "--only takes kafka, redis, cardinal or a comma-separated list" >&2; exit 2; }

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$root/bench/.work/serve"
data="$work/data"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
out="$work/runs/$stamp"
scratch="$work/scratch/$stamp"   # broker and Redis data: deleted on exit
mkdir -p "$data" "$out" "$scratch"

say() { printf '== %s\n' "$*" >&2; }

# ---- processes: every one started here is stopped on exit ---------------------
pids=()
stop_pid() { # stop_pid PID: SIGTERM, up to 20 s for a clean exit, then SIGKILL
    local pid="$1"
    kill -0 "$pid" 2>/dev/null || return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 200); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local pid
    for pid in "${pids[@]}"; do stop_pid "$pid"; done
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

cpu_ticks() { # cpu_ticks PID: user + system time of a live process, in clock ticks
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}
tick="$(getconf CLK_TCK)"
now() { date +%s.%N; }

# ---- tools ---------------------------------------------------------------------
missing=()
if [[ $run_kafka == 1 ]]; then
    command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
    command -v mvn >/dev/null || missing+=(maven)
fi
if [[ $run_redis == 1 ]]; then
    command -v redis-server >/dev/null || missing+=(redis-server)
    command -v redis-cli >/dev/null || missing+=(redis-tools)
fi
if [[ ${#missing[@]} -gt 0 ]]; then
    say "installing ${missing[*]} (Debian packages)"
    sudo=""
    [[ "$(id -u)" != 0 ]] && sudo="sudo"
    $sudo apt-get update
    $sudo apt-get install -y "${missing[@]}"
fi

# Kafka's broker and tools: the runtime jars of bench/serve/pom.xml, copied
# with Maven once into a cache outside the clone by .ci/kafka (which CI and
# the Kafka tests share), and again whenever the pom changes.
kafka_lib=""
if [[ $run_kafka == 1 ]]; then
    kafka_lib="$("$root/.ci/kafka" jars)"
fi

# ---- inputs ----------------------------------------------------------------------
# W1's records, one CSV line each, without the header (every line of a payload
# file is a record to Kafka's tool); and the same records as the RESP commands
# `PFADD w1:reach:<day>:<state> <user_id>` that redis-cli --pipe sends. Written
# under temporary names and renamed when complete.
records="$data/impressions-$EVENTS.csv"
resp="$data/pfadd-$EVENTS.resp"
if [[ ! -f "$records" || ( $run_redis == 1 && ! -f "$resp" ) || $run_cardinal == 1 ]]; then
    if [[ -n "${CARDINAL:-}" ]]; then
        cardinal="$CARDINAL"
    else
        say "building cardinal (release-lto)"
        (cd "$root" && cargo build -q --profile release-lto -p cardinal --bin cardinal)
        cardinal="${CARGO_TARGET_DIR:-$root/target}/release-lto/cardinal"
    fi
fi
# The HTTP row's client: crates/server/examples/load.rs.
if [[ $run_cardinal == 1 && $HTTP_SECONDS -gt 0 ]]; then
    if [[ -n "${LOAD:-}" ]]; then
        load="$LOAD"
    else
        say "building the load example (release-lto)"
        (cd "$root" && cargo build -q --profile release-lto -p cardinal-server --example load)
        load="${CARGO_TARGET_DIR:-$root/target}/release-lto/examples/load"
    fi
fi
if [[ ! -f "$records" ]]; then
    say "generating $EVENTS W1 records"
    "$cardinal" gen impressions --events "$EVENTS" -o "$records.full.tmp"
    tail -n +2 "$records.full.tmp" >"$records.tmp"
    rm "$records.full.tmp"
    mv "$records.tmp" "$records"
fi
if [[ $run_redis == 1 && ! -f "$resp" ]]; then
    say "writing the PFADD commands for redis-cli --pipe"
    LC_ALL=C awk -F, '{
        key = "w1:reach:" substr($1, 1, 10) ":" $4
        printf "*3\r\n$5\r\nPFADD\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(key), key, length($2), $2
    }' "$records" >"$resp.tmp"
    mv "$resp.tmp" "$resp"
fi
record_bytes="$(stat -c %s "$records")"

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) online"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "disk: $(df -h "$work" | awk 'NR == 2 { print $1, $2 }')"
    echo "events: $EVENTS ($record_bytes bytes of CSV records)"
    if [[ $run_kafka == 1 ]]; then
        echo "java: $(java -version 2>&1 | head -1)"
        jars=("$kafka_lib"/kafka_2.13-*.jar)
        echo "kafka: ${jars[0]##*/}"
    fi
    [[ $run_redis == 1 ]] && echo "redis: $(redis-server --version)"
    [[ $run_cardinal == 1 ]] && echo "cardinal: $cardinal, built $(stat -c %y "$cardinal" | cut -d. -f1)"
    echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    # What one fsync costs on the disk the servers write to, right now.
    python3 - "$scratch/fsync-probe" <<'EOF'
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
for size in (4096, 1 << 20):
    times = []
    for _ in range(21):
        t = time.perf_counter()
        os.write(fd, b"x" * size)
        os.fdatasync(fd)
        times.append(time.perf_counter() - t)
    times.sort()
    print(f"append + fdatasync of {size >> 10} KiB: median {times[10] * 1e3:.1f} ms, max {times[-1] * 1e3:.1f} ms")
os.close(fd)
os.unlink(sys.argv[1])
EOF
} >"$out/machine.txt"
results="$out/results.jsonl"
: >"$results"

# ---- Kafka: one broker, KRaft, every batch fsynced before it is acknowledged ------
jvm_gc=(-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
    -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true)   # kafka-run-class.sh's
kafka_tool() { # kafka_tool CLASS ARGS...: one of Kafka's command-line tools
    java -Xmx256m "${jvm_gc[@]}" -cp "$kafka_lib/*" "$@"
}
# Batches up to 16 MiB: the broker's message.max.bytes and the producer's
# max.request.size (both 1 MiB by default) must let the largest batch.size
# through.
kafka_max_bytes=16777216
if [[ $run_kafka == 1 ]]; then
    mapfile -t ports < <(free_ports 3)
    broker_port="${ports[0]}" controller_port="${ports[1]}" jmx_port="${ports[2]}"
    kdir="$scratch/kafka"
    mkdir -p "$kdir/data" "$kdir/logs"
    # log.flush.interval.messages=1: after every append to a partition's log
    # (one produce request's batch for it) the broker fsyncs the segment
    # before the append returns, so before the acks=all answer goes out.
    cat >"$kdir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$broker_port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$broker_port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$kdir/data
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
log.flush.interval.messages=1
message.max.bytes=$kafka_max_bytes
EOF
    cat >"$kdir/log4j2.properties" <<EOF
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $kdir/logs/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.file.ref = file
EOF
    say "formatting KRaft storage and starting the broker on 127.0.0.1:$broker_port"
    cluster_id="$(kafka_tool kafka.tools.StorageTool random-uuid)"
    kafka_tool kafka.tools.StorageTool format -t "$cluster_id" -c "$kdir/server.properties" >"$kdir/logs/format.txt"
    # The same heap and collector as kafka-server-start.sh; JMX on loopback
    # only, to read the broker's own count of log flushes.
    java -Xms1g -Xmx1g "${jvm_gc[@]}" \
        -Dlog4j2.configurationFile="$kdir/log4j2.properties" \
        -Dcom.sun.management.jmxremote -Dcom.sun.management.jmxremote.host=127.0.0.1 \
        -Dcom.sun.management.jmxremote.port="$jmx_port" -Dcom.sun.management.jmxremote.rmi.port="$jmx_port" \
        -Dcom.sun.management.jmxremote.authenticate=false -Dcom.sun.management.jmxremote.ssl=false \
        -Djava.rmi.server.hostname=127.0.0.1 \
        -cp "$kafka_lib/*" kafka.Kafka "$kdir/server.properties" \
        >"$kdir/logs/stdout.txt" 2>&1 &
    broker_pid=$!
    pids+=("$broker_pid")
    for _ in $(seq 900); do   # at most 90 s
        grep -q 'Kafka Server started' "$kdir/logs/server.log" 2>/dev/null && break
        kill -0 "$broker_pid" 2>/dev/null || break
        sleep 0.1
    done
    if ! grep -q 'Kafka Server started' "$kdir/logs/server.log" 2>/dev/null; then
        say "the broker did not start within 90 s; its log ends:"
        tail -20 "$kdir/logs/server.log" "$kdir/logs/stdout.txt" >&2 || true
        exit 1
    fi
    flushes() { # the broker's LogFlushStats count: fsyncs of partition logs so far
        kafka_tool org.apache.kafka.tools.JmxTool --one-time true --report-format tsv \
            --jmx-url "service:jmx:rmi:///jndi/rmi://127.0.0.1:$jmx_port/jmxrmi" \
            --object-name kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs --attributes Count \
            2>/dev/null | awk -F'\t' '$1 ~ /Count$/ { v = $2 } END { print v + 0 }'
    }
fi

kafka_round() { # kafka_round ROUND BATCH_SIZE LINGER_MS
    local round="$1" batch="$2" linger="$3"
    local topic="w1-r$round-b$batch-l$linger" raw="$out/kafka-r$round-b$batch-l$linger.txt"
    kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$broker_port" \
        --create --topic "$topic" --partitions 1 --replication-factor 1 \
        --config flush.messages=1 >/dev/null
    # The tool holds every line of the payload file in memory: give it room.
    local heap_mb=$(( 1024 + record_bytes * 6 / 1048576 ))
    local f0 b0 t0 t1 b1 f1
    f0="$(flushes)"; b0="$(cpu_ticks "$broker_pid")"; t0="$(now)"
    /usr/bin/time -f 'client_cpu %U %S' -o "$raw.time" \
        timeout --foreground "$TIMEOUT" java "-Xmx${heap_mb}m" "${jvm_gc[@]}" -cp "$kafka_lib/*" \
        org.apache.kafka.tools.ProducerPerformance --bootstrap-server "127.0.0.1:$broker_port" \
        --topic "$topic" --num-records "$EVENTS" --throughput -1 --payload-file "$records" \
        --command-property acks=all "batch.size=$batch" "linger.ms=$linger" \
        "max.request.size=$kafka_max_bytes" \
        --print-metrics >"$raw" 2>&1 || { say "kafka-producer-perf-test failed:"; tail -20 "$raw" >&2; exit 1; }
    t1="$(now)"; b1="$(cpu_ticks "$broker_pid")"; f1="$(flushes)"
    kafka_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$broker_port" \
        --delete --topic "$topic" >/dev/null
    python3 - "$raw" "$round" "$batch" "$linger" "$EVENTS" "$t0" "$t1" "$b0" "$b1" "$tick" "$f0" "$f1" >>"$results" <<'EOF'
import json, re, sys
raw, rnd, batch, linger, events, t0, t1, b0, b1, tick, f0, f1 = sys.argv[1:]
text = open(raw).read()
# The last summary line: "N records sent, R records/sec (M MB/sec), A ms avg
# latency, X ms max latency, P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th."
m = re.findall(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
               r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th", text)
if not m:
    sys.exit(f"no summary line in {raw}")
sent, rate, mbs, avg, mx, p50, p95, p99, p999 = m[-1]
def metric(name):
    v = re.search(r"^producer-metrics:" + re.escape(name) + r":\{client-id=[^}]*\}\s*:\s*([\d.E+-]+)", text, re.M)
    return float(v.group(1)) if v else None
cu, cs = open(raw + ".time").read().split()[1:3]
# request-total also counts metadata requests; this is produce requests alone.
per_request = metric("records-per-request-avg")
requests = round(int(sent) / per_request) if per_request else None
flushes = int(f1) - int(f0)
print(json.dumps({
    "system": "kafka", "round": int(rnd), "setting": f"batch.size={batch} linger.ms={linger}",
    "events": int(sent), "events_per_s": float(rate), "mb_per_s": float(mbs),
    "wall_s": float(t1) - float(t0),
    "p50_ms": int(p50), "p95_ms": int(p95), "p99_ms": int(p99), "p999_ms": int(p999),
    "avg_ms": float(avg), "max_ms": float(mx),
    "server_cpu_s": (int(b1) - int(b0)) / int(tick), "client_cpu_s": float(cu) + float(cs),
    "produce_requests": requests, "records_per_request": per_request,
    "batch_bytes_avg": metric("batch-size-avg"), "log_flushes": flushes,
}))
EOF
    tail -1 "$results" | python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("   kafka %-34s %9.0f events/s  %6.1f MB/s  p50 %4d ms  p99 %4d ms  %s flushes / %s requests" % (r["setting"], r["events_per_s"], r["mb_per_s"], r["p50_ms"], r["p99_ms"], r["log_flushes"], int(r["produce_requests"] or 0)))' >&2
}

# ---- Redis: PFADD of W1's user ids, pipelined -----------------------------------
if [[ $run_redis == 1 ]]; then
    mapfile -t ports < <(free_ports 2)
    volatile_port="${ports[0]}" durable_port="${ports[1]}"
    declare -A redis_pid
    start_redis() { # start_redis NAME PORT ARGS...: a server in its own directory
        local name="$1" port="$2"; shift 2
        mkdir -p "$scratch/redis-$name"
        redis-server --bind 127.0.0.1 --port "$port" --dir "$scratch/redis-$name" --save '' \
            --daemonize no --logfile "$scratch/redis-$name/redis.log" "$@" &
        pids+=("$!")
        redis_pid[$name]=$!
        for _ in $(seq 100); do   # at most 10 s
            redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
            sleep 0.1
        done
        say "redis-server ($name) did not answer within 10 s"
        exit 1
    }
    say "starting redis-server on 127.0.0.1:$volatile_port (no persistence) and :$durable_port (AOF, fsync always)"
    start_redis volatile "$volatile_port" --appendonly no
    start_redis durable "$durable_port" --appendonly yes --appendfsync always
fi

redis_round() { # redis_round ROUND NAME PORT PID
    local round="$1" name="$2" port="$3" pid="$4"
    local raw="$out/redis-r$round-$name.txt"
    redis-cli -p "$port" flushall >/dev/null
    if [[ "$name" == durable ]]; then   # start from an empty append-only file
        redis-cli -p "$port" bgrewriteaof >/dev/null
        for _ in $(seq 100); do   # at most 10 s
            redis-cli -p "$port" info persistence | grep -q '^aof_rewrite_in_progress:0' && break
            sleep 0.1
        done
    fi
    local s0 t0 t1 s1 r0 r1
    reads() { # socket reads the server has done so far: one per event-loop pass here
        redis-cli -p "$port" info stats | tr -d '\r' | awk -F: '$1 == "total_reads_processed" { print $2 }'
    }
    r0="$(reads)"; s0="$(cpu_ticks "$pid")"; t0="$(now)"
    /usr/bin/time -f 'client_cpu %U %S' -o "$raw.time" \
        timeout --foreground "$TIMEOUT" redis-cli -p "$port" --pipe <"$resp" >"$raw" 2>&1 \
        || { say "redis-cli --pipe failed:"; tail -5 "$raw" >&2; exit 1; }
    t1="$(now)"; s1="$(cpu_ticks "$pid")"; r1="$(reads)"
    local keys
    keys="$(redis-cli -p "$port" dbsize)"
    python3 - "$raw" "$round" "$name" "$EVENTS" "$t0" "$t1" "$s0" "$s1" "$tick" "$keys" "$r0" "$r1" >>"$results" <<'EOF'
import json, re, sys
raw, rnd, name, events, t0, t1, s0, s1, tick, keys, r0, r1 = sys.argv[1:]
text = open(raw).read()
m = re.search(r"errors: (\d+), replies: (\d+)", text)
if not m or int(m.group(1)) != 0 or int(m.group(2)) != int(events):
    sys.exit(f"redis-cli --pipe did not get {events} replies without errors: {text.strip()}")
wall = float(t1) - float(t0)
cu, cs = open(raw + ".time").read().split()[1:3]
print(json.dumps({
    "system": "redis", "round": int(rnd),
    "setting": "PFADD, no persistence" if name == "volatile" else "PFADD, appendfsync always",
    "events": int(events), "events_per_s": int(events) / wall, "wall_s": wall,
    "server_cpu_s": (int(s1) - int(s0)) / int(tick), "client_cpu_s": float(cu) + float(cs),
    "keys": int(keys), "socket_reads": int(r1) - int(r0) - 1,  # less the INFO call's own
}))
EOF
    tail -1 "$results" | python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("   redis %-34s %9.0f adds/s    server %.2f CPU-s" % (r["setting"], r["events_per_s"], r["server_cpu_s"]))' >&2
}

# ---- cardinal serve: the number these anchors are for -------------------------------
# A fresh `cardinal serve` per measurement (W1's summaries, its data under
# $scratch, random free ports), the same records file through `cardinal send`
# (or the HTTP load example), then the server's /metrics: the acknowledgement
# latency histogram (admission to acknowledgement, server side; quantiles
# interpolated linearly within a bucket, as Prometheus' histogram_quantile
# does) and the accepted count, which must equal the events acknowledged to
# the client. SIGTERM must stop it with exit status 0 (after a last snapshot).
schema="$root/bench/engine/schemas/impressions.sql"
cardinal_start() { # cardinal_start NAME: a fresh server; sets c_pid, c_port, c_http
    local name="$1"
    mapfile -t ports < <(free_ports 2)
    c_port="${ports[0]}" c_http="${ports[1]}"
    mkdir -p "$scratch/$name"
    "$cardinal" serve "$schema" --listen "127.0.0.1:$c_port" --http "127.0.0.1:$c_http" \
        --data "$scratch/$name/data" >"$out/$name.server.txt" 2>&1 &
    c_pid=$!
    pids+=("$c_pid")
    for _ in $(seq 300); do   # at most 30 s
        curl -sf "http://127.0.0.1:$c_http/healthz" >/dev/null 2>&1 && return 0
        kill -0 "$c_pid" 2>/dev/null || break
        sleep 0.1
    done
    say "cardinal serve did not become ready within 30 s; its output ends:"
    tail -20 "$out/$name.server.txt" >&2
    exit 1
}
cardinal_stop() { # cardinal_stop NAME: SIGTERM, at most 120 s to exit, exit status 0 required
    local name="$1" rc=0
    kill -TERM "$c_pid"
    for _ in $(seq 1200); do
        kill -0 "$c_pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$c_pid" 2>/dev/null; then
        say "cardinal serve did not exit within 120 s of SIGTERM"
        exit 1
    fi
    wait "$c_pid" || rc=$?
    if [[ $rc != 0 ]]; then
        say "cardinal serve exited with status $rc after SIGTERM; its output ends:"
        tail -5 "$out/$name.server.txt" >&2
        exit 1
    fi
    rm -rf "${scratch:?}/$name"
}
cardinal_result() { # cardinal_result KIND RAW ROUND SETTING T0 T1 S0 S1: one JSON line
    python3 - "$@" "$EVENTS" "$tick" <<'EOF'
import json, math, re, sys
kind, raw, rnd, setting, t0, t1, s0, s1, events, tick = sys.argv[1:]
metrics = open(raw + ".metrics").read()
def scalar(name):
    total, found = 0.0, False
    for m in re.finditer(r"^" + re.escape(name) + r"(?:\{[^}]*\})? ([0-9.eE+-]+)$", metrics, re.M):
        total += float(m.group(1)); found = True
    if not found:
        sys.exit(f"no {name} in {raw}.metrics")
    return total
def quantile(name, q):
    # Cumulative buckets; the rank's bucket found, the value interpolated
    # linearly between its bounds (the first bucket's lower bound is 0).
    buckets = sorted((math.inf if le == "+Inf" else float(le), float(c)) for le, c in
                     re.findall(r"^" + re.escape(name) + r'_bucket\{le="([^"]+)"\} ([0-9.eE+-]+)$', metrics, re.M))
    total = buckets[-1][1] if buckets else 0
    if total == 0:
        return None
    rank, lo, below = q * total, 0.0, 0.0
    for le, c in buckets:
        if c >= rank:
            if le == math.inf:
                return lo   # past the largest bound: reported as that bound
            return lo + (le - lo) * ((rank - below) / (c - below) if c > below else 0.0)
        lo, below = le, c
    return lo
wall = float(t1) - float(t0)
accepted = int(scalar("cardinal_events_accepted_total"))
row = {"system": "cardinal", "round": int(rnd), "setting": setting, "transport": kind}
cu, cs = open(raw + ".time").read().split()[1:3]
if kind == "native":
    text = open(raw).read()
    m = re.search(r"records accepted (\d+), rejected (\d+)", text)
    b = re.search(r"acknowledged (\d+) batches \((\d+) as duplicates of an earlier send\), (\d+) refused", text)
    if not m or not b:
        sys.exit(f"no summary from cardinal send in {raw}")
    sent, rejected = int(m.group(1)), int(m.group(2))
    if sent + rejected != int(events) or rejected or int(b.group(3)):
        sys.exit(f"cardinal send: {sent} accepted and {rejected} rejected of {events}, {b.group(3)} batches refused")
    row.update({"events": sent, "batches": int(b.group(1)), "events_per_s": sent / wall})
else:
    load = json.loads(open(raw).read().strip().splitlines()[-1])
    if load["batches_posted"] != load["batches"] or load["failed_posts"]:
        sys.exit(f"load: {load['batches']} of {load['batches_posted']} batches acknowledged, "
                 f"{load['failed_posts']} failed posts")
    sent = load["events"]
    row.update({"events": sent, "batches": load["batches"], "events_per_s": load["events_per_s"],
                "client_p50_ms": load["p50_ms"], "client_p99_ms": load["p99_ms"],
                "http_503": load["http_503"], "rss_mib_last_third_max": load["rss_mib_last_third_max"]})
    wall = load["wall_s"]
if accepted != sent:
    sys.exit(f"the server's cardinal_events_accepted_total is {accepted}, the client's acknowledged events {sent}")
p50, p99 = quantile("cardinal_ack_latency_seconds", 0.5), quantile("cardinal_ack_latency_seconds", 0.99)
fs50 = quantile("cardinal_wal_fsync_seconds", 0.5)
syncs = int(scalar("cardinal_wal_syncs_total"))
row.update({
    "mb_per_s": float(open(raw + ".bytes").read()) / wall / 1e6 if kind == "native" else None,
    "wall_s": wall, "accepted_metric": accepted,
    "p50_ms": p50 * 1e3 if p50 is not None else None, "p99_ms": p99 * 1e3 if p99 is not None else None,
    "latency": "server histogram, interpolated within buckets",
    "server_cpu_s": (int(s1) - int(s0)) / int(tick), "client_cpu_s": float(cu) + float(cs),
    "wal_syncs": syncs, "wal_bytes": int(scalar("cardinal_wal_bytes_total")),
    "fsync_p50_ms": fs50 * 1e3 if fs50 is not None else None,
    "batches_per_sync": row["batches"] / syncs if syncs else None,
})
print(json.dumps(row))
EOF
}

cardinal_round() { # cardinal_round ROUND BATCH_KIB WINDOW: `cardinal send` of the records
    local round="$1" batch="$2" window="$3"
    local name="cardinal-r$round-b$batch-w$window"
    local raw="$out/$name.txt" s0 t0 t1 s1
    cardinal_start "$name"
    stat -c %s "$records" >"$raw.bytes"
    s0="$(cpu_ticks "$c_pid")"; t0="$(now)"
    /usr/bin/time -f 'client_cpu %U %S' -o "$raw.time" \
        timeout --foreground "$TIMEOUT" "$cardinal" send "$records" --to "127.0.0.1:$c_port" \
        --stream impressions --no-header --batch-kib "$batch" --window "$window" >"$raw" 2>&1 \
        || { say "cardinal send failed:"; tail -20 "$raw" >&2; exit 1; }
    t1="$(now)"; s1="$(cpu_ticks "$c_pid")"
    curl -sf "http://127.0.0.1:$c_http/metrics" >"$raw.metrics"
    cardinal_stop "$name"
    cardinal_result native "$raw" "$round" "send --batch-kib $batch --window $window" \
        "$t0" "$t1" "$s0" "$s1" >>"$results"
    tail -1 "$results" | python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("   cardinal %-31s %9.0f events/s  %6.1f MB/s  p50 %6.1f ms  p99 %6.1f ms  server %.2f CPU-s  %d syncs" % (r["setting"], r["events_per_s"], r["mb_per_s"], r["p50_ms"], r["p99_ms"], r["server_cpu_s"], r["wal_syncs"]))' >&2
}

cardinal_http_round() { # cardinal_http_round ROUND: the load example, as fast as it goes
    local round="$1" name="cardinal-r$1-http"
    local raw="$out/$name.txt" s0 t0 t1 s1
    cardinal_start "$name"
    s0="$(cpu_ticks "$c_pid")"; t0="$(now)"
    # The load example drops its input's first line as a header: one record
    # fewer per pass over the file, counted as what it is.
    /usr/bin/time -f 'client_cpu %U %S' -o "$raw.time" \
        timeout --foreground "$TIMEOUT" "$load" --http "127.0.0.1:$c_http" --stream impressions \
        --input "$records" --connections 4 --batch-kib 1024 --seconds "$HTTP_SECONDS" \
        --pid "$c_pid" >"$raw" 2>"$raw.progress" \
        || { say "the load example failed:"; tail -20 "$raw.progress" >&2; exit 1; }
    t1="$(now)"; s1="$(cpu_ticks "$c_pid")"
    curl -sf "http://127.0.0.1:$c_http/metrics" >"$raw.metrics"
    cardinal_stop "$name"
    cardinal_result http "$raw" "$round" "HTTP POST, 4 connections, 1 MiB bodies" \
        "$t0" "$t1" "$s0" "$s1" >>"$results"
    tail -1 "$results" | python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); print("   cardinal %-31s %9.0f events/s  p50 %6.1f ms  p99 %6.1f ms  server %.2f CPU-s  %d 503s" % (r["setting"], r["events_per_s"], r["p50_ms"], r["p99_ms"], r["server_cpu_s"], r["http_503"]))' >&2
}

# ---- interleaved rounds -----------------------------------------------------------
IFS=',' read -r -a settings <<<"$KAFKA_SETTINGS"
IFS=',' read -r -a cardinal_settings <<<"$CARDINAL_SETTINGS"
say "$ROUNDS round(s) of $EVENTS events; raw results in ${out#"$root"/}"
for round in $(seq "$ROUNDS"); do
    say "round $round"
    if [[ $run_kafka == 1 ]]; then
        for s in "${settings[@]}"; do
            kafka_round "$round" "${s%%:*}" "${s##*:}"
        done
    fi
    if [[ $run_redis == 1 ]]; then
        redis_round "$round" volatile "$volatile_port" "${redis_pid[volatile]}"
        redis_round "$round" durable "$durable_port" "${redis_pid[durable]}"
    fi
    if [[ $run_cardinal == 1 ]]; then
        for s in "${cardinal_settings[@]}"; do
            cardinal_round "$round" "${s%%:*}" "${s##*:}"
        done
        if [[ $HTTP_SECONDS -gt 0 ]]; then
            cardinal_http_round "$round"
        fi
    fi
done

echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

# ---- table: the best round of each setting, and the best setting of Kafka -----------
python3 - "$results" "$out/machine.txt" <<'EOF' | tee "$out/table.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
machine = dict(l.rstrip("\n").split(": ", 1) for l in open(sys.argv[2]) if ": " in l)
best = {}
for r in rows:
    k = (r["system"], r["setting"])
    if k not in best or r["events_per_s"] > best[k]["events_per_s"]:
        best[k] = r
kafka = [r for (s, _), r in best.items() if s == "kafka"]
top = max(kafka, key=lambda r: r["events_per_s"]) if kafka else None
print(f"Durable ingest, {machine.get('date')} at {machine.get('commit')}: {machine.get('events')}, "
      f"best of {max(r['round'] for r in rows)} round(s); load {machine.get('load at start')} "
      f"at start, {machine.get('load at end')} at end; the disk before the run:")
for k, v in machine.items():
    if k.startswith("append + fdatasync"):
        print(f"{k}: {v}")
print()
print("| system | setting | events/s | MB/s | p50 / p99 ms | wall s | server CPU-s | events / server CPU-s | client CPU-s | fsyncs / requests; reads |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
def per_cpu(r):
    return f"{r['events'] / r['server_cpu_s']:,.0f}" if r["server_cpu_s"] > 0 else ""
for (system, setting), r in best.items():
    mark = " (best)" if r is top else ""
    if system == "kafka":
        req = r["produce_requests"]
        print(f"| Kafka acks=all | {setting}{mark} | {r['events_per_s']:,.0f} | {r['mb_per_s']:.1f} | "
              f"{r['p50_ms']} / {r['p99_ms']} | {r['wall_s']:.1f} | {r['server_cpu_s']:.2f} | {per_cpu(r)} | "
              f"{r['client_cpu_s']:.2f} | {r['log_flushes']:,} / {int(req or 0):,} |")
    elif system == "redis":
        print(f"| Redis | {setting} | {r['events_per_s']:,.0f} | | | {r['wall_s']:.1f} | "
              f"{r['server_cpu_s']:.2f} | {per_cpu(r)} | {r['client_cpu_s']:.2f} | {r['socket_reads']:,} reads |")
ours = [r for (s, _), r in best.items() if s == "cardinal"]
native = [r for r in ours if r["transport"] == "native"]
mine = max(native, key=lambda r: r["events_per_s"]) if native else None
def ms(v):
    return "-" if v is None else f"{v:.1f}"
for r in ours:
    mark = " (best)" if r is mine else ""
    mb = f"{r['mb_per_s']:.1f}" if r.get("mb_per_s") is not None else ""
    print(f"| cardinal {'send' if r['transport'] == 'native' else 'HTTP'} | {r['setting']}{mark} | "
          f"{r['events_per_s']:,.0f} | {mb} | {ms(r['p50_ms'])} / {ms(r['p99_ms'])} | {r['wall_s']:.1f} | "
          f"{r['server_cpu_s']:.2f} | {per_cpu(r)} | {r['client_cpu_s']:.2f} | "
          f"{r['wal_syncs']:,} syncs / {r['batches']:,} batches |")
if ours:
    print()
    print("cardinal's latency is the server's histogram (admission to acknowledgement), "
          "interpolated within its buckets; Kafka's is its tool's, send to acknowledgement.")
if mine:
    print()
    print(f"cardinal send's best ({mine['setting']}, {mine['events_per_s']:,.0f} events/s) over each anchor:")
    print()
    print("| anchor | setting | events/s | cardinal / anchor |")
    print("|---|---|---:|---:|")
    for (system, setting), r in best.items():
        if system in ("kafka", "redis"):
            print(f"| {system} | {setting} | {r['events_per_s']:,.0f} | {mine['events_per_s'] / r['events_per_s']:.2f}x |")
EOF
say "results in ${out#"$root"/}"
