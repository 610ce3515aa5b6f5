"""Reads the KLL and Theta sketches `cardinal run --sketch-bytes` wrote into
hourly CSV rows and merges them with Apache DataSketches, as a warehouse
would: hourly files into one day's percentiles and audience.

usage: merge.py FILE.csv ENCODING   (hex or base64)
prints: n p50 p99 rank_error theta_estimate theta_lower theta_upper
"""
import base64
import csv
import sys

from datasketches import compact_theta_sketch, kll_doubles_sketch, theta_union

path, encoding = sys.argv[1], sys.argv[2]
decode = bytes.fromhex if encoding == "hex" else base64.b64decode
merged = None
union = theta_union()
with open(path, newline="") as f:
    for row in csv.DictReader(f):
        kll = kll_doubles_sketch.deserialize(decode(row["rev_sketch"]))
        if merged is None:
            merged = kll
        else:
            merged.merge(kll)
        union.update(compact_theta_sketch.deserialize(decode(row["th_sketch"])))
theta = union.get_result()
print(
    merged.n,
    merged.get_quantile(0.5),
    merged.get_quantile(0.99),
    merged.normalized_rank_error(False),
    theta.get_estimate(),
    theta.get_lower_bound(2),
    theta.get_upper_bound(2),
)
