"""Latency of one simple query over the PostgreSQL wire: N round trips
on one psycopg connection, after a warm-up. Prints p50 and p99 in ms.

Usage: latency.py HOST PORT N [SQL]
"""

import sys
import time

import psycopg

host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sql = sys.argv[4] if len(sys.argv) > 4 else "SELECT state, events, users FROM reach ORDER BY state"
with psycopg.connect(host=host, port=port, dbname="cardinal", user="test", autocommit=True) as conn:
    for _ in range(50):
        conn.execute(sql).fetchall()
    seconds = []
    for _ in range(n):
        start = time.perf_counter()
        conn.execute(sql).fetchall()
        seconds.append(time.perf_counter() - start)
seconds.sort()
p50 = seconds[len(seconds) // 2] * 1e3
p99 = seconds[min(len(seconds) - 1, int(len(seconds) * 0.99))] * 1e3
print(f"{n} queries: p50 {p50:.3f} ms, p99 {p99:.3f} ms")
