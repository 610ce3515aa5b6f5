#!/usr/bin/env bash
# The rollup engine (`cardinal run`) against DuckDB and chDB (embedded
# ClickHouse), on the same generated files, interleaved in one run.
# Current results in bench/README.md; the rounds in bench/JOURNAL.md,
# "Engine against DuckDB and chDB".
#
#   bench/engine/run.sh                          # defaults below, 3 rounds
#   bench/engine/run.sh --events 2000000 --rows 2000000 --rounds 1
#   bench/engine/run.sh --only W2 --threads 1    # extra flags go to harness.py
#
# Flags (environment variables of the same name in capitals work too):
#   --events N    impressions rows for W1/W3       (default 20000000)
#   --rows N      uservisits rows for W2/W3        (default 20000000, ~3.4 GB)
#   --rounds R    interleaved rounds, best-of kept (default 3)
# Anything else is passed on to harness.py (--only, --threads, --systems,
# --cardinal-cmd, ...; see `harness.py --help`).
#
# Idempotent: the virtualenv (bench/.work/venv, pinned duckdb and chdb from
# requirements.txt), the inputs and their compressed and Parquet copies
# (bench/.work/engine/data/) are made only when missing. Each run writes
# results.jsonl, checks.txt and table.md to bench/.work/engine/runs/<UTC time>/.
set -euo pipefail

EVENTS="${EVENTS:-20000000}"
ROWS="${ROWS:-20000000}"
ROUNDS="${ROUNDS:-3}"
passthrough=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --events) EVENTS="$2"; shift 2 ;;
        --rows) ROWS="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) passthrough+=("$1"); shift ;;
    esac
done

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/bench/.work/venv"
work="$root/bench/.work/engine"
data="$work/data"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
out="$work/runs/$stamp"
mkdir -p "$data" "$out"

say() { printf '== %s\n' "$*" >&2; }

# ---- tools from Debian packages -----------------------------------------------
missing=()
command -v zstd >/dev/null || missing+=(zstd)
command -v lz4 >/dev/null || missing+=(lz4)
command -v pigz >/dev/null || command -v gzip >/dev/null || missing+=(pigz)
if [[ ${#missing[@]} -gt 0 ]]; then
    say "installing ${missing[*]} (Debian packages)"
    sudo=""
    [[ "$(id -u)" != 0 ]] && sudo="sudo"
    $sudo apt-get update
    $sudo apt-get install -y "${missing[@]}"
fi
gz=gzip
command -v pigz >/dev/null && gz=pigz

# ---- virtualenv with the pinned peers -------------------------------------------
# The stamp file records which requirements.txt the venv was made from.
if [[ ! -x "$venv/bin/python" ]] || ! cmp -s "$here/requirements.txt" "$venv/.engine-requirements"; then
    say "installing the peers into ${venv#"$root"/} ($(grep -v '^#' "$here/requirements.txt" | tr '\n' ' '))"
    [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/requirements.txt"
    cp "$here/requirements.txt" "$venv/.engine-requirements"
fi
py="$venv/bin/python"

# ---- cardinal (the generator, and the engine once it exists) --------------------
say "building cardinal (release-lto)"
(cd "$root" && cargo build -q --profile release-lto -p cardinal)
cardinal="${CARGO_TARGET_DIR:-$root/target}/release-lto/cardinal"

# ---- inputs --------------------------------------------------------------------------
# Every file is written under a temporary name and renamed when complete, so
# an interrupted run never leaves a truncated input behind.
imp="$data/impressions-$EVENTS.csv"
uv="$data/uservisits-$ROWS.txt"
if [[ ! -f "$imp" ]]; then
    say "generating $EVENTS impressions"
    "$cardinal" gen impressions --events "$EVENTS" -o "$imp.tmp" --truth "$imp.truth.json.tmp"
    mv "$imp.truth.json.tmp" "$imp.truth.json"
    mv "$imp.tmp" "$imp"
fi
if [[ ! -f "$uv" ]]; then
    say "generating $ROWS uservisits rows"
    "$cardinal" gen uservisits --rows "$ROWS" -o "$uv.tmp"
    mv "$uv.tmp" "$uv"
fi
compress() { # compress <suffix> <command...>: $uv -> $uv.<suffix>
    local suffix="$1"; shift
    if [[ ! -f "$uv.$suffix" ]]; then
        say "compressing ${uv##*/} -> .$suffix ($*)"
        "$@" <"$uv" >"$uv.$suffix.tmp"
        mv "$uv.$suffix.tmp" "$uv.$suffix"
    fi
}
compress gz "$gz" -c -6
compress zst zstd -q -c -3 -T0
compress lz4 lz4 -q -c -1
# Parquet copies, written by DuckDB with its defaults (snappy, 122880-row
# row groups), from the same text with the same explicit schemas.
"$py" "$here/harness.py" --make-parquet "$imp" "$uv"

# ---- interleaved rounds ------------------------------------------------------------
say "$ROUNDS rounds; raw results in ${out#"$root"/}"
{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) online"
    echo "memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
    echo "python: $("$py" --version 2>&1)"
    echo "peers: $("$py" -c 'import duckdb, chdb; print("duckdb", duckdb.__version__, "chdb", chdb.__version__, "(ClickHouse", chdb.engine_version + ")" if hasattr(chdb, "engine_version") else "")')"
    echo "rustc: $(cd "$root" && rustc --version)"
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/machine.txt"
"$py" "$here/harness.py" --rounds "$ROUNDS" --out "$out" --cardinal "$cardinal" \
    --impressions "$imp" --uservisits "$uv" "${passthrough[@]}"
