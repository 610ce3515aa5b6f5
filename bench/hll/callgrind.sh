#!/usr/bin/env bash
# Instructions per operation of cardinal's HyperLogLog, counted by callgrind.
# Instruction counts do not move with the neighbours' load on a shared VM,
# unlike times, so they are the number to compare before and after a change.
#
#   bench/hll/callgrind.sh            # every op of the hll_speed example
#   bench/hll/callgrind.sh union      # one op
#
# The example's --small mode calls each timed function exactly once (65536
# values, or 1000 calls for per-sketch ops); --toggle-collect counts only
# the instructions inside that function, so Ir / ops is per operation.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$root/bench/.work/hll/callgrind"
mkdir -p "$work"

(cd "$root" && cargo build -q --profile release-lto -p cardinal-sketch --example hll_speed)
bin="${CARGO_TARGET_DIR:-$root/target}/release-lto/examples/hll_speed"

# op, timed function, operations per call in --small mode
ops=(
    "insert_prehashed insert_prehashed_all 65536"
    "hash_insert hash_insert_all 65536"
    "union union_many 1000"
    "estimate estimate_many 1000"
    "cardinality cardinality_many 1000"
)
printf '%-18s %14s %8s\n' op instructions per_op
for entry in "${ops[@]}"; do
    read -r op function count <<<"$entry"
    [[ $# -gt 0 && "$1" != "$op" ]] && continue
    file="$work/callgrind.$op.out"
    valgrind --tool=callgrind --callgrind-out-file="$file" \
        --collect-atstart=no --toggle-collect="hll_speed::$function" \
        "$bin" --small --op "$op" >/dev/null 2>"$work/valgrind.$op.log"
    ir="$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$file")"
    printf '%-18s %14s %8.1f\n' "$op" "$ir" "$(python3 -c "print($ir / $count)")"
done
