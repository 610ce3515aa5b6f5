"""psycopg 3 and pandas against `cardinal serve --pg`.

Usage: clients.py HOST PORT [PASSWORD]. Exits 0 when every check holds;
an assertion names the one that does not. The server holds summary
`reach` (day, state, events, users...) with one user in CA and one in TX
on 2026-11-01 (crates/cli/tests/pg.rs).
"""

import datetime
import sys

import pandas
import psycopg
import psycopg.errors

host, port = sys.argv[1], int(sys.argv[2])
password = sys.argv[3] if len(sys.argv) > 3 else None
conninfo = dict(host=host, port=port, dbname="cardinal", user="test", connect_timeout=10)
if password is not None:
    conninfo["password"] = password

with psycopg.connect(**conninfo) as conn:
    # Server-side parameters ($1): psycopg's extended protocol.
    rows = conn.execute(
        "SELECT state, events FROM reach WHERE state = %s ORDER BY state", ["TX"]
    ).fetchall()
    assert rows == [("TX", 1)], rows

    # A quote in a parameter is a quote, not SQL.
    rows = conn.execute("SELECT state FROM reach WHERE state = %s", ["O'Brien"]).fetchall()
    assert rows == [], rows

    # Prepared statements (Parse once, Bind/Execute each time).
    for state, events in [("CA", 1), ("TX", 1)]:
        rows = conn.execute(
            "SELECT events, users FROM reach WHERE state = %s LIMIT %s",
            [state, 1],
            prepare=True,
        ).fetchall()
        assert rows[0][0] == events and isinstance(rows[0][1], float), rows

    # Describing a statement before its parameters are bound (what JDBC
    # and pgx do): the parameters' types and the result columns'.
    res = conn.pgconn.prepare(b"with_param", b"SELECT state, users FROM reach WHERE state = $1")
    assert res.status == psycopg.pq.ExecStatus.COMMAND_OK, res.error_message
    res = conn.pgconn.describe_prepared(b"with_param")
    assert res.status == psycopg.pq.ExecStatus.COMMAND_OK, res.error_message
    assert [res.param_type(0)] == [25], res.param_type(0)
    assert [res.ftype(c) for c in range(res.nfields)] == [25, 701]

    # Types: timestamptz, int8, float8, text, bool; in binary too.
    for binary in (False, True):
        cur = conn.cursor(binary=binary)
        cur.execute("SELECT day, state, events, users, events > 0 AS some FROM reach ORDER BY state")
        day, state, events, users, some = cur.fetchone()
        assert day == datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc), day
        assert (state, events, some) == ("CA", 1, True), (state, events, some)
        assert abs(users - 1.0) < 0.01, users
        names = [d.name for d in cur.description]
        assert names == ["day", "state", "events", "users", "some"], names

    # A timestamp parameter (psycopg sends timestamptz).
    since = datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc)
    rows = conn.execute("SELECT sum(events) AS n FROM reach WHERE day >= %s", [since]).fetchall()
    assert rows == [(2,)], rows

    # Errors carry their SQLSTATE, and the session goes on.
    try:
        conn.execute("SELECT nope FROM reach")
        raise AssertionError("an unknown column is an error")
    except psycopg.errors.UndefinedColumn as e:
        assert "unknown column" in str(e), e
    conn.rollback()
    try:
        conn.execute("SELECT 1 FROM nowhere")
        raise AssertionError("an unknown table is an error")
    except psycopg.errors.UndefinedTable:
        pass
    conn.rollback()
    try:
        conn.execute("SELEC 1")
        raise AssertionError("a syntax error is an error")
    except psycopg.errors.SyntaxError:
        pass
    conn.rollback()
    try:
        conn.execute("SELECT state FROM reach WHERE state = '" + "x" * (256 << 10) + "'")
        raise AssertionError("a query over the text limit is refused")
    except psycopg.errors.ProgramLimitExceeded:
        pass
    conn.rollback()
    assert conn.execute("SELECT 1").fetchone() == (1,)

    # pandas over the psycopg connection.
    frame = pandas.read_sql("SELECT state, events, users FROM reach ORDER BY state", conn)
    assert list(frame["state"]) == ["CA", "TX"], frame
    assert list(frame["events"]) == [1, 1], frame
    assert str(frame["users"].dtype) == "float64", frame.dtypes

print("ok")
