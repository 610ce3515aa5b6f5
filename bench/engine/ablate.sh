#!/usr/bin/env bash
# What each aggregate family costs in W1/W3: the impressions schema, and
# copies of it with one family swapped for a plain count or sum, timed
# alternately on one input with one worker. See bench/JOURNAL.md, "Where
# W3's time goes".
#
#   bench/engine/ablate.sh INPUT [ROUNDS] [CARDINAL]
#
# INPUT is an impressions file from bench/engine/run.sh (CSV or Parquet,
# chosen by its extension); ROUNDS defaults to 3; CARDINAL to the release-lto
# binary under $CARGO_TARGET_DIR (build it first: cargo build --profile release-lto).
# Prints, per variant and round, the workers' seconds (what `cardinal
# run` reports) and the process's CPU seconds (user + system).
set -euo pipefail

input="${1:?usage: ablate.sh INPUT [ROUNDS] [CARDINAL]}"
rounds="${2:-3}"
here="$(cd "$(dirname "$0")" && pwd)"
bin="${3:-${CARGO_TARGET_DIR:-$here/../../target}/release-lto/cardinal}"
if [[ ! -x "$bin" ]]; then
    echo "ablate.sh: no cardinal binary at $bin (cargo build --profile release-lto, or pass it as CARDINAL)" >&2
    exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

base="$here/schemas/impressions.sql"
if [[ "$input" == *.parquet ]]; then
    sed "s/WITH (format = 'csv', header = true,/WITH (format = 'parquet',/" "$base" >"$work/all.sql"
else
    cp "$base" "$work/all.sql"
fi
grep -q "hll(user_id)" "$work/all.sql"
sed 's/hll(user_id)/count(user_id)/g' "$work/all.sql" >"$work/no-hll.sql"
sed -e 's/approx_quantile(revenue, 0\.[0-9]*)/sum(revenue)/g' "$work/all.sql" >"$work/no-quantiles.sql"
sed 's/topk(site, 10)/count(site)/' "$work/all.sql" >"$work/no-topk.sql"
sed -e 's/hll(user_id)/count(user_id)/g' -e 's/approx_quantile(revenue, 0\.[0-9]*)/sum(revenue)/g' \
    -e 's/topk(site, 10)/count(site)/' "$work/all.sql" >"$work/counts-only.sql"
# One summary: the filter, the day bucket and the state key alone.
awk '/^CREATE SUMMARY reach/ { exit } { print }' "$work/all.sql" >"$work/one-count.sql"
cat >>"$work/one-count.sql" <<'EOF'
CREATE SUMMARY reach AS
  SELECT date_trunc('day', ts) AS day, state, count(*) AS events
  FROM impressions WHERE kind = 'impression'
  GROUP BY day, state;
EOF

variants=(all no-hll no-quantiles no-topk counts-only one-count)
printf '%-14s %5s %9s %7s\n' variant round workers cpu
for round in $(seq "$rounds"); do
    for v in "${variants[@]}"; do
        rm -rf "$work/out"
        /usr/bin/time -f "%U %S" -o "$work/time" \
            "$bin" run "$work/$v.sql" "$input" --threads 1 --out "$work/out" \
            >/dev/null 2>"$work/err"
        workers=$(grep -o 'in [0-9.]* s' "$work/err" | head -1 | awk '{print $2}')
        cpu=$(awk '{printf "%.2f", $1 + $2}' "$work/time")
        printf '%-14s %5s %9s %7s\n' "$v" "$round" "$workers" "$cpu"
    done
done
