"""N psycopg connections at once, each running one query.

Usage: many_connections.py HOST PORT N. Prints how many answered; exits 1
unless all did.
"""

import sys
import threading

import psycopg

host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
answered = []
errors = []
ready = threading.Barrier(n, timeout=60)


def one():
    try:
        with psycopg.connect(host=host, port=port, dbname="cardinal", user="test",
                             connect_timeout=20, autocommit=True) as conn:
            ready.wait()  # every connection open before any query
            rows = conn.execute("SELECT sum(events) AS n FROM reach").fetchall()
            answered.append(rows[0][0])
    except Exception as e:  # reported below
        errors.append(repr(e))


threads = [threading.Thread(target=one) for _ in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join(120)
print(len(answered), "answered;", len(errors), "errors:", errors[:3])
sys.exit(0 if len(answered) == n and set(answered) == {2} else 1)
