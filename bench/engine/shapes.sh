#!/usr/bin/env bash
# What one summary of each common shape costs, beyond the benchmark's
# three: plain, cut (substr), two-column and evaluated keys, filters, and
# the exact and Theta aggregates, over the engine benchmark's 20M-row
# files, one worker, timed alternately. A shape far above its neighbours
# is a path the engine takes badly. See bench/JOURNAL.md, "Keys memoized
# by their texts".
#
#   bench/engine/shapes.sh [ROUNDS] [CARDINAL] [DATA]
#
# ROUNDS defaults to 2; CARDINAL to the release-lto binary under
# $CARGO_TARGET_DIR (build it first: cargo build --profile release-lto); DATA to
# bench/.work/engine/data, where bench/engine/run.sh leaves
# impressions-20000000.csv and uservisits-20000000.txt. Prints, per
# shape and round, the process's user and system CPU seconds and its
# peak resident memory.
set -euo pipefail

rounds="${1:-2}"
here="$(cd "$(dirname "$0")" && pwd)"
bin="${2:-${CARGO_TARGET_DIR:-$here/../../target}/release-lto/cardinal}"
data="${3:-$here/../.work/engine/data}"
if [[ ! -x "$bin" ]]; then
    echo "shapes.sh: no cardinal binary at $bin (cargo build --profile release-lto, or pass it as CARDINAL)" >&2
    exit 1
fi
impressions="$data/impressions-20000000.csv"
uservisits="$data/uservisits-20000000.txt"
for input in "$impressions" "$uservisits"; do
    if [[ ! -f "$input" ]]; then
        echo "shapes.sh: no $input (bench/engine/run.sh makes it)" >&2
        exit 1
    fi
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

imp="CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT,
  site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
  WITH (format = 'csv', header = true, time = 'ts');"
uv="CREATE STREAM uservisits (sourceIP TEXT, destURL TEXT, visitDate DATE,
  adRevenue DOUBLE, userAgent TEXT, countryCode TEXT, languageCode TEXT,
  searchWord TEXT, duration INT)
  WITH (format = 'csv', header = false);"
day="date_trunc('day', ts) AS day"
impression="WHERE kind = 'impression'"

# name|stream|summary
shapes=(
    "day|imp|SELECT $day, count(*) AS n FROM impressions $impression GROUP BY day"
    "state|imp|SELECT $day, state, count(*) AS n FROM impressions $impression GROUP BY day, state"
    "state,provider|imp|SELECT $day, state, provider, count(*) AS n FROM impressions $impression GROUP BY day, state, provider"
    "lower(state)|imp|SELECT $day, lower(state) AS s, count(*) AS n FROM impressions $impression GROUP BY day, s"
    "no filter|imp|SELECT $day, state, count(*) AS n FROM impressions GROUP BY day, state"
    "filter IN|imp|SELECT $day, state, count(*) AS n FROM impressions WHERE kind IN ('impression', 'click') GROUP BY day, state"
    "filter AND|imp|SELECT $day, state, count(*) AS n FROM impressions $impression AND state <> 'TX' GROUP BY day, state"
    "filter number|imp|SELECT $day, state, count(*) AS n FROM impressions WHERE revenue > 0.005 GROUP BY day, state"
    "hll|imp|SELECT $day, state, count(*) AS n, hll(user_id) AS u FROM impressions $impression GROUP BY day, state"
    "exact_distinct|imp|SELECT $day, state, count(*) AS n, exact_distinct(user_id) AS u FROM impressions $impression GROUP BY day, state"
    "theta|imp|SELECT $day, state, count(*) AS n, theta(user_id) AS u FROM impressions $impression GROUP BY day, state"
    "count(sourceIP)|uv|SELECT count(sourceIP) AS n FROM uservisits"
    "substr 1|uv|SELECT substr(sourceIP, 1, 1) AS p, sum(adRevenue) AS r FROM uservisits GROUP BY p"
    "substr 8 (2A)|uv|SELECT substr(sourceIP, 1, 8) AS p, sum(adRevenue) AS r FROM uservisits GROUP BY p"
)

printf '%-16s %5s %6s %6s %8s\n' shape round user sys max_MB
for round in $(seq "$rounds"); do
    for shape in "${shapes[@]}"; do
        IFS='|' read -r name stream select <<<"$shape"
        if [[ "$stream" == imp ]]; then
            head="$imp" input="$impressions"
        else
            head="$uv" input="$uservisits"
        fi
        printf '%s\nCREATE SUMMARY s AS %s;\n' "$head" "$select" >"$work/shape.sql"
        rm -rf "$work/out"
        /usr/bin/time -f "%U %S %M" -o "$work/time" \
            "$bin" run "$work/shape.sql" "$input" --threads 1 --quiet --out "$work/out" \
            >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
        read -r user sys kb <"$work/time"
        printf '%-16s %5s %6s %6s %8s\n' "$name" "$round" "$user" "$sys" "$((kb / 1024))"
    done
done
