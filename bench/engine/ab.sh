#!/usr/bin/env bash
# Two builds of `cardinal run` side by side on W1 (impressions CSV), Query 2A
# (uservisits text) and W3 (the impressions as Parquet): the check that a
# refactor costs nothing. Rounds interleave the builds (A, B, A, B, ...) so
# that both see the same machine; the best user+system CPU seconds of each
# are kept, and every answer of B must equal A's byte for byte.
#
#   bench/engine/ab.sh OLD_BINARY NEW_BINARY IMPRESSIONS.csv USERVISITS.txt \
#       [IMPRESSIONS.parquet] [--rounds R] [--threads T]
#
# Make the binaries with `cargo build --profile release-lto -p cardinal` at
# each commit (a worktree per commit), the inputs with `cardinal gen
# impressions` and `cardinal gen uservisits`, and the Parquet copy with
# `bench/engine/harness.py --make-parquet` (DuckDB COPY). Prints one line
# per workload: best CPU seconds of A and B and the ratio B/A.
set -euo pipefail

ROUNDS=5
THREADS=1
positional=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) positional+=("$1"); shift ;;
    esac
done
[[ ${#positional[@]} -ge 4 ]] || { echo "usage: see --help" >&2; exit 2; }
a="${positional[0]}"; b="${positional[1]}"; imp="${positional[2]}"; uv="${positional[3]}"
parquet="${positional[4]:-}"

here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
sed -E "s/format\s*=\s*'csv'\s*,\s*header\s*=\s*(true|false)/format = 'parquet'/" \
    "$here/schemas/impressions.sql" >"$work/impressions-parquet.sql"

cases=("W1|$here/schemas/impressions.sql|$imp" "2A|$here/schemas/uservisits.sql|$uv")
[[ -n "$parquet" ]] && cases+=("W3|$work/impressions-parquet.sql|$parquet")

declare -A best
for round in $(seq 1 "$ROUNDS"); do
    for c in "${cases[@]}"; do
        IFS='|' read -r name schema input <<<"$c"
        for side in A B; do
            bin="$a"; [[ $side == B ]] && bin="$b"
            out="$work/$name-$side"
            rm -rf "$out"
            /usr/bin/time -f '%U %S' -o "$work/time" \
                "$bin" run "$schema" "$input" --threads "$THREADS" --out "$out" --no-progress >/dev/null
            read -r user sys <"$work/time"
            cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')
            key="$name-$side"
            if [[ -z "${best[$key]:-}" ]] || awk -v x="$cpu" -v y="${best[$key]}" 'BEGIN { exit !(x < y) }'; then
                best[$key]=$cpu
            fi
        done
        diff -r "$work/$name-A" "$work/$name-B" >/dev/null \
            || { echo "$name: the answers of A and B differ" >&2; exit 1; }
        echo "round $round $name: A ${best[$name-A]} B ${best[$name-B]} (best so far, CPU-s)" >&2
    done
done
for c in "${cases[@]}"; do
    name="${c%%|*}"
    awk -v n="$name" -v x="${best[$name-A]}" -v y="${best[$name-B]}" \
        'BEGIN { printf "%-3s A %6.2f CPU-s  B %6.2f CPU-s  B/A %.3f\n", n, x, y, y / x }'
done
