"""Grafana's PostgreSQL data source, replayed: the SQL blocks of
docs/grafana.md as written, the health check (`-- ping`, simple
protocol) and the editor's metadata queries, over the extended protocol
with binary results as Grafana's driver (pgx) reads them.

Usage: grafana.py HOST PORT DOCS/grafana.md
"""

import re
import sys

import psycopg

host, port, doc = sys.argv[1], int(sys.argv[2]), sys.argv[3]
blocks = re.findall(r"```sql\n(.*?)```", open(doc, encoding="utf-8").read(), re.S)
assert len(blocks) >= 4, f"{doc} has {len(blocks)} sql blocks"

with psycopg.connect(host=host, port=port, dbname="cardinal", user="grafana",
                     connect_timeout=10, autocommit=True) as conn:
    # Health check: pgx's Ping is the simple query "-- ping".
    conn.pgconn.exec_(b"-- ping")
    # pgx prepares each query and describes the statement (Parse,
    # Describe, Sync) before it binds: the result types come from there.
    pg = conn.pgconn
    OK = psycopg.pq.ExecStatus.COMMAND_OK
    for i, sql in enumerate(blocks):
        name = f"stmtcache_{i}".encode()
        res = pg.prepare(name, sql.strip().encode())
        assert res.status == OK, res.error_message
        res = pg.describe_prepared(name)
        assert res.status == OK, res.error_message
        names = [res.fname(c).decode() for c in range(res.nfields)]
        types = [res.ftype(c) for c in range(res.nfields)]
        print("described", names, types)
        assert res.nfields > 0 and all(t in (16, 20, 25, 701, 1184) for t in types), types
    for sql in blocks:
        cur = conn.cursor(binary=True)
        cur.execute(sql.strip(), prepare=True)
        rows = cur.fetchall()
        names = [d.name for d in cur.description]
        print(names, rows)
        assert rows, f"no rows for:\n{sql}"
print("ok")

# The query editor's metadata queries, as Grafana's PostgreSQL data source
# builds them (public/app/plugins/datasource/grafana-postgresql-datasource/
# postgresMetaQuery.ts: getVersion, getTimescaleDBVersion, showTables,
# getSchema('reach')).
SCHEMA_CONSTRAINT = """
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )"""
META = {
    "version": ("SELECT current_setting('server_version_num')::int/100 as version", [(1500,)]),
    "timescaledb": ("SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'", []),
    "tables": (f"""SELECT
    CASE WHEN {SCHEMA_CONSTRAINT}
      THEN quote_ident(table_name)
      ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
    END AS "table"
    FROM information_schema.tables
    WHERE quote_ident(table_schema) NOT IN ('information_schema',
                             'pg_catalog',
                             '_timescaledb_cache',
                             '_timescaledb_catalog',
                             '_timescaledb_internal',
                             '_timescaledb_config',
                             'timescaledb_information',
                             'timescaledb_experimental')
    ORDER BY CASE WHEN {SCHEMA_CONSTRAINT} THEN 0 ELSE 1 END, 1""", [("reach",)]),
    "tables in public": ("""SELECT quote_ident(table_name) AS "table"
      FROM information_schema.tables
      WHERE quote_ident(table_schema) = 'public'
      ORDER BY 1""", [("reach",)]),
    "columns": (f"""SELECT quote_ident(column_name) AS "column", data_type AS "type"
    FROM information_schema.columns
    WHERE
      CASE WHEN array_length(parse_ident('reach'),1) = 2
        THEN quote_ident(table_schema) = (parse_ident('reach'))[1]
          AND quote_ident(table_name) = (parse_ident('reach'))[2]
        ELSE quote_ident(table_name) = 'reach'
          AND {SCHEMA_CONSTRAINT}
      END""", None),
}

with psycopg.connect(host=host, port=port, dbname="cardinal", user="grafana",
                     connect_timeout=10, autocommit=True) as conn:
    for name, (sql, expected) in META.items():
        cur = conn.cursor(binary=True)
        cur.execute(sql, prepare=True)
        rows = cur.fetchall()
        print(name, rows)
        if expected is not None:
            assert rows == expected, (name, rows)
    columns = dict(rows)
    assert columns["day"] == "timestamp with time zone", columns
    assert columns["state"] == "text", columns
    assert columns["events"] == "bigint", columns
    assert columns["users"] == "double precision", columns
print("metadata ok")
