#!/usr/bin/env bash
# The issue 4 scale runs, one after the other (each takes a core for many
# minutes; the long run needs ~14 GiB):
#
#  1. the index alone (KeyIndex, no chains): 500M distinct keys inserted;
#  2. the store grown from 0 to ~200M live keys by an arrival process of new
#     users (75% of operations; the rest Zipf s = 1.1 over recency), then
#     held there by a lookback of 1300 virtual seconds at 200,000 appends/s
#     and trim slices of 4096 index slots every 256 appends (16 slots per
#     append, which keeps the index under 18 B/key), for 1.4B appends in
#     all; append_batch over batches of 64 operations, each batch timed by
#     the thread CPU clock;
#  3. the same workload one append at a time, every operation timed by the
#     thread CPU clock (the per-operation histogram), to 20M live keys;
#  4. (repeat, not in the default) every operation timed by the thread CPU
#     clock, each run twice with the same seed: the index alone to 500M
#     keys, the store grown to ~112M keys (150M appends), and the store at
#     steady state with expiry at a tenth of the scale. Operations of
#     at least 100 us go to a log per run; bench/chains/repeat.py joins the
#     logs, so an operation over 1 ms in one run only is told from one whose
#     own work passes 1 ms (it does in every run);
#  5. (control, not in the default) the noise floor: 9.5M batches of fixed
#     work (448 random read-modify-writes over a resident 16 GiB buffer,
#     about a median store batch), timed as the store's batches: how many
#     pass 1 ms is what the machine adds.
#
#   bench/chains/scale.sh [index|long|per-op|repeat|control]...   (default: the first three)
#
# Results go to bench/chains/out/ (not committed); bench/README.md has the
# numbers of a run. The long run needs ~16 GiB; the page cache is dropped
# first when this runs as root, so that faults do not wait on reclaim.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/cardinal-target-chains}"
OUT=bench/chains/out
mkdir -p "$OUT"
cargo build --profile release-lto -p cardinal-chains --example chains_bench
BIN="$CARGO_TARGET_DIR/release-lto/examples/chains_bench"
WORKLOAD=(--new-user-permille 750 --lookback-s 1300 --trim-budget 4096 --trim-every 256 --keys-max 200000000)
drop_caches() {
    if [ "$(id -u)" = 0 ]; then sync && echo 3 > /proc/sys/vm/drop_caches; fi
}

for step in "${@:-index long per-op}"; do
    for s in $step; do
        case "$s" in
        index)
            echo "== the index alone, 500M keys"
            "$BIN" --mode index --keys-max 500000000 --report-every 20000000 | tee "$OUT/index_500m.txt"
            ;;
        long)
            echo "== grow to ~200M keys, then steady state: 1.4B appends, batches of 64"
            drop_caches
            "$BIN" --mode chains "${WORKLOAD[@]}" --appends 1400000000 --timing batch --report-every 100000000 | tee "$OUT/long.txt"
            ;;
        repeat)
            for run in 1 2; do
                echo "== the index alone to 500M keys, every insert timed (CPU clock), run $run"
                "$BIN" --mode index --keys-max 500000000 --report-every 50000000 --clock cpu \
                    --slow-log "$OUT/repeat_index_$run.tsv" | tee "$OUT/repeat_index_$run.txt"
            done
            bench/chains/repeat.py "$OUT"/repeat_index_{1,2}.tsv | tee "$OUT/repeat_index.txt"
            for run in 1 2; do
                echo "== the store to ~112M keys, every operation timed (CPU clock), run $run"
                drop_caches
                "$BIN" --mode chains "${WORKLOAD[@]}" --appends 150000000 --timing op --clock cpu \
                    --report-every 25000000 --slow-log "$OUT/repeat_store_$run.tsv" | tee "$OUT/repeat_store_$run.txt"
            done
            bench/chains/repeat.py "$OUT"/repeat_store_{1,2}.tsv | tee "$OUT/repeat_store.txt"
            # The store at steady state with expiry, at a tenth of the scale
            # (the pair above ends before the lookback frees anyone).
            for run in 1 2; do
                echo "== the store at steady state (20M keys), every operation timed (CPU clock), run $run"
                "$BIN" --mode chains --new-user-permille 750 --lookback-s 130 --trim-budget 4096 \
                    --trim-every 256 --keys-max 20000000 --appends 60000000 --timing op --clock cpu \
                    --report-every 10000000 --slow-log "$OUT/repeat_steady_$run.tsv" | tee "$OUT/repeat_steady_$run.txt"
            done
            bench/chains/repeat.py "$OUT"/repeat_steady_{1,2}.tsv | tee "$OUT/repeat_steady.txt"
            ;;
        control)
            echo "== the noise floor: batches of fixed work over 16 GiB, timed as the store's batches"
            drop_caches
            "$BIN" --mode control --control-gib 16 --appends 609000000 | tee "$OUT/control_16g.txt"
            ;;
        per-op)
            echo "== per operation, thread CPU clock, 30M appends"
            "$BIN" --mode chains "${WORKLOAD[@]}" --appends 30000000 --timing op --clock cpu | tee "$OUT/per_op_cpu.txt"
            ;;
        *)
            echo "unknown step $s" >&2
            exit 1
            ;;
        esac
    done
done
