#!/usr/bin/env bash
# HyperLogLog speed of cardinal against java-hll, Apache DataSketches (Java)
# and Redis, measured side by side in one run. See bench/README.md.
#
#   bench/hll/run.sh                 # 5 interleaved rounds, then the table
#   ROUNDS=9 bench/hll/run.sh
#   SKIP_REDIS=1 bench/hll/run.sh    # no Debian package needed
#
# Installs what is missing: the Java peers through Maven (into a local
# repository under bench/.work/), redis-server through apt-get, and builds
# the Rust example in release mode. All generated state stays in bench/.work/.
set -euo pipefail

ROUNDS="${ROUNDS:-5}"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$root/bench/.work/hll"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
out="$work/runs/$stamp"
mkdir -p "$work" "$out"

say() { printf '== %s\n' "$*" >&2; }

# ---- Java peers -------------------------------------------------------------
java_target="$work/java-target"
jar="$java_target/hll-peers-0.1.0.jar"
if [[ ! -f "$jar" || -n "$(find "$here/java" -newer "$jar" -type f -print -quit)" ]]; then
    say "building the Java peers (net.agkn:hll 1.6.0, datasketches-java 7.0.1)"
    mvn -q -B -Dmaven.repo.local="$root/bench/.work/m2" -f "$here/java/pom.xml" package
fi
java_classpath="$jar:$java_target/lib/*"

# ---- Redis --------------------------------------------------------------------
redis_args=()
if [[ -z "${SKIP_REDIS:-}" ]]; then
    if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
        say "installing redis-server (Debian package)"
        sudo=""
        [[ "$(id -u)" != 0 ]] && sudo="sudo"
        $sudo apt-get update
        $sudo apt-get install -y redis-server redis-tools
    fi
    # A random free high port, so that parallel runs and other services on
    # the machine do not collide.
    port="$(python3 -c '
import random, socket
for _ in range(100):
    port = random.randint(20000, 60999)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(port)
    break
')"
    mkdir -p "$work/redis"
    # hll-sparse-max-bytes 0 makes the key dense from its first PFADD, the
    # counterpart of the FULL sketches timed on the other rows.
    redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no \
        --dir "$work/redis" --hll-sparse-max-bytes 0 --daemonize no \
        --logfile "$work/redis/redis.log" &
    redis_pid=$!
    trap 'kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true' EXIT
    for _ in $(seq 100); do
        redis-cli -p "$port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    redis-cli -p "$port" ping >/dev/null
    redis-cli -p "$port" del hll:bench >/dev/null
    redis-benchmark -h 127.0.0.1 -p "$port" -P 1000 -n 200000 -r 1000000000 -q \
        PFADD hll:bench __rand_int__ >/dev/null
    encoding="$(redis-cli -p "$port" pfdebug encoding hll:bench)"
    say "redis $(redis-server --version | cut -d' ' -f3) on 127.0.0.1:$port, key encoding $encoding"
    redis_args=(--redis-port "$port" --redis-pid "$redis_pid")
fi

# ---- cardinal -----------------------------------------------------------------
cardinal_args=()
if [[ -f "$root/crates/sketch/examples/hll_speed.rs" ]]; then
    say "building crates/sketch/examples/hll_speed.rs (release-lto)"
    (cd "$root" && cargo build -q --profile release-lto -p cardinal-sketch --example hll_speed)
    cardinal_args=(--cardinal "${CARGO_TARGET_DIR:-$root/target}/release-lto/examples/hll_speed")
else
    say "crates/sketch/examples/hll_speed.rs is missing: peers only"
fi

# ---- interleaved rounds ---------------------------------------------------------
say "$ROUNDS rounds; raw results in ${out#"$root"/}"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) online"
    echo "java: $(java -version 2>&1 | head -1)"
    echo "rustc: $(cd "$root" && rustc --version)"
} >"$out/machine.txt"
python3 "$here/harness.py" --rounds "$ROUNDS" --out "$out" \
    --java-classpath "$java_classpath" "${cardinal_args[@]}" "${redis_args[@]}"
