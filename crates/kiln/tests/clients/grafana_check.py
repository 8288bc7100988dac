"""What Grafana's PostgreSQL data source sends, run against Kiln.

Grafana (pkg/tsdb/grafana-postgresql-datasource) runs every panel query
with pgx's PgConn().Exec: the simple query protocol, macros already
expanded into the SQL text, no parameters; it turns each result column
into a data frame field by its type OID (an OID pgx does not know fails
the panel with "unknown data type oid"). Its health check is pgx's Ping
("-- ping"). Its query editor (postgresMetaQuery.ts) lists schemas,
tables and columns from information_schema with quote_ident,
string_to_array over search_path, generate_series over array bounds and
parse_ident; the older editor (meta_query.ts) picks time/value/metric
columns by information_schema.columns.data_type / udt_name names.
Macros (macros.go): $__timeFilter(ts) -> ts BETWEEN '<RFC3339>' AND
'<RFC3339>'; $__timeGroup(ts, '1m') -> floor(extract(epoch from ts)/60)*60
(AS "time" with $__timeGroupAlias); $__timeEpoch(ts) -> extract(epoch
from ts) as "time"; $__timeFrom()/$__timeTo() -> '<RFC3339>';
$__unixEpochFilter(c) -> c >= <s> AND c <= <s>.

Rows are written over HTTP (/v1/write, NDJSON) as an agent would, then
read with psycopg 3 over the simple protocol (no parameters), as
Grafana's pgx does. Every check runs and its result goes to stderr. A
check in KNOWN_GAPS (below: what fails against Kiln today, and why) that
fails is reported as a known gap; one that passes fails the run, so the
list stays true. Any other failure fails the run: failures are listed at
the end and the exit code is 1.

Usage: python3 grafana_check.py PG_PORT HTTP_PORT   (prints "ok" on stdout
when every check passes or is a known gap)
"""
import json
import sys
import time
import urllib.request
from datetime import datetime, timedelta

import psycopg

# Checks that fail against Kiln today: name -> why. Strict: a listed check
# that passes fails the run ("now passes: remove it from KNOWN_GAPS").
KNOWN_GAPS = {}

FAILURES = []
RAN = set()

# Type OIDs pgx's default type map knows (pgtype.NewMap().TypeForOID);
# Grafana fails a panel on any other result column OID.
PGX_OIDS = {
    16, 17, 18, 19, 20, 21, 23, 25, 26, 114, 700, 701, 705, 1042, 1043, 1082,
    1083, 1114, 1184, 1186, 1266, 1700, 2950, 3802,
    1000, 1005, 1007, 1009, 1015, 1016, 1021, 1022, 1115, 1185,
}

FROM = "2026-01-01T00:00:00Z"
TO = "2026-01-02T00:00:00Z"

# search_path resolution Grafana's editors use (buildSchemaConstraint).
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


def describe(e):
    state = getattr(e, "sqlstate", None)
    first = (str(e).strip().splitlines() or [repr(e)])[0]
    return f"{type(e).__name__}: {first}" + (f" [SQLSTATE {state}]" if state else "")


def log(line):
    print(line, file=sys.stderr, flush=True)


def check(name, fn):
    """Runs one named check, recording (not stopping at) a failure; a check
    in KNOWN_GAPS must fail."""
    RAN.add(name)
    start = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - every failure is reported
        msg = f"{name}: {describe(e)}"
        if name in KNOWN_GAPS:
            log(f"known gap: {name}: {KNOWN_GAPS[name]}")
            log(f"    (got {msg})")
            return
        FAILURES.append(msg)
        log(f"FAIL {msg} ({time.monotonic() - start:.2f}s)")
        return
    if name in KNOWN_GAPS:
        FAILURES.append(f"{name}: now passes: remove it from KNOWN_GAPS")
        log(f"FAIL {name}: now passes: remove it from KNOWN_GAPS")
        return
    log(f"pass {name} ({time.monotonic() - start:.2f}s)")


def finish():
    """Lists the failures and exits 1 if there are any, else prints ok."""
    for name in KNOWN_GAPS:
        if name not in RAN:
            FAILURES.append(f"{name}: in KNOWN_GAPS but never ran (renamed?)")
    if FAILURES:
        print(f"\n{len(FAILURES)} check(s) failed:", file=sys.stderr)
        for f in FAILURES:
            print(f"  - {f}", file=sys.stderr)
        sys.exit(1)
    print("ok")


class Simple:
    """Runs SQL text over the simple query protocol (psycopg sends a query
    without parameters with PQsendQuery), checking result OIDs as Grafana's
    frame conversion would."""

    def __init__(self, dsn):
        self.conn = psycopg.connect(dsn, autocommit=True)

    def query(self, sql):
        cur = self.conn.cursor()
        cur.execute(sql)
        if cur.description is None:
            return [], []
        for d in cur.description:
            assert d.type_code in PGX_OIDS, (
                f"column {d.name!r} has type OID {d.type_code}, unknown to pgx: "
                f'Grafana fails with "unknown data type oid: {d.type_code}"'
            )
        return [d.name for d in cur.description], cur.fetchall()


def http_write(port, table, rows):
    body = "".join(json.dumps(r) + "\n" for r in rows).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/write/{table}", data=body,
        headers={"Content-Type": "application/x-ndjson"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status in (200, 201, 204), r.status


def main(pg_port, http_port):
    dsn = f"host=127.0.0.1 port={pg_port} user=grafana password=grafana dbname=kiln"
    db = Simple(dsn)
    db.query("DROP TABLE IF EXISTS graf")
    db.query("CREATE TABLE graf (ts TIMESTAMP NOT NULL, host VARCHAR, v DOUBLE, n BIGINT, epoch BIGINT)")
    t0 = datetime(2026, 1, 1)
    rows = []
    # Two hosts, one point every 30 s over 3 days (Dec 31 .. Jan 2).
    for i in range(3 * 2880):
        ts = t0 - timedelta(days=1) + timedelta(seconds=30 * i)
        for h, host in enumerate(("web-1", "web-2")):
            rows.append({
                "ts": ts.strftime("%Y-%m-%dT%H:%M:%S"), "host": host,
                "v": float(i % 60) + h, "n": i, "epoch": int((ts - datetime(1970, 1, 1)).total_seconds()),
            })
    http_write(http_port, "graf", rows)
    log(f"pass setup ({len(rows)} rows over HTTP)")

    def ping():
        # pgx's Ping (Grafana's "Save & test").
        cur = db.conn.cursor()
        cur.execute("-- ping")
        assert cur.pgresult.status == psycopg.pq.ExecStatus.EMPTY_QUERY, cur.pgresult.status

    check("health check: pgx Ping '-- ping'", ping)

    def version():
        cols, got = db.query("SELECT current_setting('server_version_num')::int/100 as version")
        assert cols == ["version"] and got == [(1600,)], (cols, got)

    check("getVersion: current_setting('server_version_num')::int/100", version)

    def server_version_num():
        _, got = db.query("SELECT current_setting('server_version_num')")
        assert got == [("160006",)], got

    check("SELECT current_setting('server_version_num')", server_version_num)

    def show_timezone():
        cols, got = db.query("SHOW timezone")
        assert got == [("UTC",)], (cols, got)

    check("SHOW timezone", show_timezone)

    def timescale():
        # Grafana's config page runs this to offer the TimescaleDB toggle.
        _, got = db.query("SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'")
        assert got == [], got

    check("getTimescaleDBVersion: pg_extension", timescale)

    def schemas():
        _, got = db.query("""SELECT schema_name AS "name"
    FROM information_schema.schemata
    WHERE schema_name NOT IN ('information_schema',
                              'pg_catalog',
                              'pg_toast',
                              '_timescaledb_cache',
                              '_timescaledb_catalog',
                              '_timescaledb_internal',
                              '_timescaledb_config',
                              'timescaledb_information',
                              'timescaledb_experimental')
    ORDER BY schema_name""")
        names = [r[0] for r in got]
        assert "public" in names, names

    check("showSchemas: information_schema.schemata", schemas)

    def tables_in_schema():
        cols, got = db.query("""SELECT quote_ident(table_name) AS "table"
      FROM information_schema.tables
      WHERE quote_ident(table_schema) = 'public'
      ORDER BY 1""")
        assert cols == ["table"], cols
        assert ("graf",) in got, got

    check("showTables('public'): quote_ident on information_schema.tables", tables_in_schema)

    def tables_search_path():
        cols, got = db.query(f"""SELECT
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
    ORDER BY CASE WHEN {SCHEMA_CONSTRAINT} THEN 0 ELSE 1 END, 1""")
        names = [r[0] for r in got]
        assert "graf" in names, names  # public is on the search_path: unqualified
        assert "system.queries" in names, names

    check("showTables(): tables on the search_path, others schema-qualified", tables_search_path)

    def legacy_tables():
        _, got = db.query(
            "SELECT quote_ident(table_name) FROM information_schema.tables WHERE "
            + SCHEMA_CONSTRAINT + " ORDER BY table_name")
        assert ("graf",) in got, got

    check("legacy buildTableQuery (search_path constraint)", legacy_tables)

    want_types = [
        ("ts", "timestamp without time zone", "timestamp"),
        ("host", "character varying", "varchar"),
        ("v", "double precision", "float8"),
        ("n", "bigint", "int8"),
        ("epoch", "bigint", "int8"),
    ]

    def columns_plain():
        # Grafana's and every editor's type filters match on these names.
        _, got = db.query("""SELECT column_name, data_type FROM information_schema.columns
            WHERE table_schema = 'public' AND table_name = 'graf' ORDER BY ordinal_position""")
        assert [tuple(r) for r in got] == [(c, t) for c, t, _ in want_types], got

    check("information_schema.columns: data_type as PostgreSQL names", columns_plain)

    def columns_udt():
        _, got = db.query("""SELECT column_name, udt_name FROM information_schema.columns
            WHERE table_schema = 'public' AND table_name = 'graf' ORDER BY ordinal_position""")
        assert [tuple(r) for r in got] == [(c, u) for c, _, u in want_types], got

    check("information_schema.columns.udt_name", columns_udt)

    def get_schema():
        cols, got = db.query(f"""SELECT quote_ident(column_name) AS "column", data_type AS "type"
    FROM information_schema.columns
    WHERE
      CASE WHEN array_length(parse_ident('graf'),1) = 2
        THEN quote_ident(table_schema) = (parse_ident('graf'))[1]
          AND quote_ident(table_name) = (parse_ident('graf'))[2]
        ELSE quote_ident(table_name) = 'graf'
          AND {SCHEMA_CONSTRAINT}
      END""")
        assert cols == ["column", "type"], cols
        assert sorted(got) == sorted((c, t) for c, t, _ in want_types), got

    check("getSchema('graf'): columns with parse_ident", get_schema)

    def legacy_time_columns():
        _, got = db.query(
            "SELECT quote_ident(column_name) FROM information_schema.columns WHERE "
            + SCHEMA_CONSTRAINT + " AND table_name = 'graf'"
            " AND data_type IN ('timestamp without time zone','timestamp with time zone','bigint','integer','double precision','real')"
            " ORDER BY column_name")
        assert [r[0] for r in got] == ["epoch", "n", "ts", "v"], got

    check("legacy buildColumnQuery('time'): data_type IN (...)", legacy_time_columns)

    def legacy_find_metric_table():
        _, got = db.query("""
SELECT
	quote_ident(table_name) as table_name,
	( SELECT
	    quote_ident(column_name) as column_name
	  FROM information_schema.columns c
    WHERE
      c.table_schema = t.table_schema AND
      c.table_name = t.table_name AND
      udt_name IN ('timestamptz','timestamp')
    ORDER BY ordinal_position LIMIT 1
  ) AS time_column,
  ( SELECT
      quote_ident(column_name) AS column_name
    FROM information_schema.columns c
    WHERE
      c.table_schema = t.table_schema AND
      c.table_name = t.table_name AND
      udt_name='float8'
    ORDER BY ordinal_position LIMIT 1
  ) AS value_column
FROM information_schema.tables t
WHERE table_schema = 'public' AND table_name = 'graf' AND
  EXISTS
  ( SELECT 1
    FROM information_schema.columns c
    WHERE
      c.table_schema = t.table_schema AND
      c.table_name = t.table_name AND
      udt_name IN ('timestamptz','timestamp')
  )
LIMIT 1""")
        assert got == [("graf", "ts", "v")], got

    check("legacy findMetricTable (correlated subqueries on columns)", legacy_find_metric_table)

    def legacy_aggregates():
        # pg_aggregate.aggfnoid is a regproc joined to pg_proc.oid.
        _, got = db.query(
            "SELECT DISTINCT proname FROM pg_aggregate "
            "INNER JOIN pg_proc ON pg_aggregate.aggfnoid = pg_proc.oid "
            "INNER JOIN pg_type ON pg_type.oid=pg_proc.prorettype "
            "WHERE pronargs=1 AND typname IN ('float8') AND aggkind='n' ORDER BY 1")
        assert got is not None

    check("legacy buildAggregateQuery (pg_aggregate, pg_proc, pg_type)", legacy_aggregates)

    # ---- panel queries, macros expanded as macros.go does ----
    time_filter = f"ts BETWEEN '{FROM}' AND '{TO}'"

    def time_group_alias():
        # $__timeGroupAlias(ts, '1m'), $__timeFilter(ts)
        cols, got = db.query(f"""SELECT
  floor(extract(epoch from ts)/60)*60 AS "time",
  avg(v) AS "v"
FROM graf
WHERE {time_filter}
GROUP BY 1
ORDER BY 1""")
        assert cols == ["time", "v"], cols
        # BETWEEN includes both ends: 1440 minutes of Jan 1 plus 00:00 of Jan 2.
        assert len(got) == 1441, len(got)
        assert float(got[0][0]) == 1767225600.0, got[0]
        assert float(got[1][0]) - float(got[0][0]) == 60.0, got[:2]
        # minute 0: i = 2880, 2881 -> v = (0,1) for web-1 and (1,2) for web-2
        assert float(got[0][1]) == 1.0, got[0]

    check("$__timeGroupAlias(ts,'1m') + $__timeFilter(ts), avg", time_group_alias)

    time_group_metric_sql = f"""SELECT
  floor(extract(epoch from ts)/3600)*3600 AS "time",
  host AS metric,
  max(v) AS "max_v"
FROM graf
WHERE ts >= '{FROM}' AND ts < '{TO}'
GROUP BY 1, 2
ORDER BY 1, 2"""

    def time_group_metric():
        # time series with a metric column (long format).
        cols, got = db.query(time_group_metric_sql)
        assert cols == ["time", "metric", "max_v"], cols
        assert len(got) == 48, len(got)
        assert got[0][1:] == ("web-1", 59.0) and got[1][1:] == ("web-2", 60.0), got[:2]

    check("$__timeGroup(ts,'1h') with a metric column, $__timeFrom/$__timeTo", time_group_metric)

    def time_macro():
        # $__time(ts), $__timeFilter(ts), table format.
        cols, got = db.query(f"""SELECT ts AS "time", host, v FROM graf
WHERE {time_filter} AND host = 'web-1' ORDER BY 1 LIMIT 3""")
        assert cols == ["time", "host", "v"], cols
        assert [r[0] for r in got] == [t0, t0 + timedelta(seconds=30), t0 + timedelta(seconds=60)], got

    check("$__time(ts) + $__timeFilter(ts)", time_macro)

    def time_epoch():
        cols, got = db.query(f"""SELECT extract(epoch from ts) as "time", v FROM graf
WHERE {time_filter} AND host = 'web-2' ORDER BY 1 LIMIT 1""")
        assert float(got[0][0]) == 1767225600.0 and got[0][1] == 1.0, got

    check("$__timeEpoch(ts)", time_epoch)

    def unix_epoch_filter():
        # $__unixEpochFilter(epoch), $__unixEpochGroupAlias(epoch,'1h')
        cols, got = db.query("""SELECT floor((epoch)/3600)*3600 AS "time", count(*) AS c FROM graf
WHERE epoch >= 1767225600 AND epoch <= 1767312000 GROUP BY 1 ORDER BY 1""")
        assert len(got) == 25 and int(got[0][1]) == 240 and int(got[-1][1]) == 2, got[:2] + got[-1:]

    check("$__unixEpochFilter / $__unixEpochGroupAlias on a BIGINT column", unix_epoch_filter)

    def to_timestamp_time():
        cols, got = db.query("""SELECT to_timestamp(epoch) AS "time", v FROM graf
WHERE epoch >= 1767225600 AND epoch <= 1767225660 AND host = 'web-1' ORDER BY 1""")
        assert [r[0].replace(tzinfo=None) for r in got] == [t0 + timedelta(seconds=s) for s in (0, 30, 60)], got

    check("to_timestamp(epoch) AS time", to_timestamp_time)

    def date_trunc_group():
        cols, got = db.query(f"""SELECT date_trunc('hour', ts) AS "time", host, count(*) AS c, sum(n) AS s
FROM graf WHERE {time_filter} GROUP BY 1, 2 ORDER BY 1, 2 LIMIT 4""")
        assert [(r[0], r[1], int(r[2])) for r in got] == [
            (t0, "web-1", 120), (t0, "web-2", 120),
            (t0 + timedelta(hours=1), "web-1", 120), (t0 + timedelta(hours=1), "web-2", 120),
        ], got

    check("date_trunc('hour', ts) group", date_trunc_group)

    def interval_arith():
        # Users write it in panels and fill queries.
        _, got = db.query("SELECT TIMESTAMP '2026-01-01 00:00:00' + 3 * INTERVAL '1 minute'")
        assert got == [(t0 + timedelta(minutes=3),)], got

    check("integer * INTERVAL", interval_arith)

    def now_window():
        # Relative ranges as users type them (Grafana itself sends absolute
        # times); result must be empty (data is in 2025/2026-01).
        _, got = db.query("SELECT count(*) FROM graf WHERE ts > now() - INTERVAL '5 minutes'")
        assert got == [(0,)], got

    check("ts > now() - INTERVAL '5 minutes'", now_window)

    def variable_query():
        # A dashboard variable: distinct values, as Grafana's legacy
        # buildValueQuery writes it.
        _, got = db.query(f"SELECT DISTINCT quote_literal(host) FROM graf WHERE {time_filter} "
                          "AND host IS NOT NULL ORDER BY 1 LIMIT 100")
        assert got == [("'web-1'",), ("'web-2'",)], got

    check("variable query: DISTINCT quote_literal(host)", variable_query)

    def multi_value_variable():
        # A multi-value variable expands to a quoted list: host IN ('web-1','web-2').
        _, got = db.query(f"SELECT host, count(*) FROM graf WHERE {time_filter} "
                          "AND host IN ('web-1','web-2') GROUP BY host ORDER BY host")
        assert [(h, int(c)) for h, c in got] == [("web-1", 2881), ("web-2", 2881)], got

    check("multi-value variable: host IN ('web-1','web-2')", multi_value_variable)

    def multi_statement():
        # PgConn().Exec runs every statement of the text; Grafana keeps the
        # SELECT results.
        cur = db.conn.cursor()
        cur.execute("SET statement_timeout = '30s'; SELECT count(*) FROM graf WHERE " + time_filter)
        got = []
        while True:
            if cur.description is not None:
                got.append(cur.fetchall())
            if not cur.nextset():
                break
        assert got == [[(5762,)]], got

    check("several statements in one simple query (SET; SELECT)", multi_statement)

    def cube_answers_time_group():
        # A cube of hours answers $__timeGroup(ts, '1h') with the same
        # answer; $__timeGroup(ts, '1m') is finer, read raw, and EXPLAIN
        # says why.
        db.query("CREATE CUBE graf_hourly ON graf DIMENSIONS (host, date_trunc('hour', ts) AS hour) "
                 "MEASURES (count(*) AS n, max(v) AS max_v)")
        time_group_metric()
        _, plan = db.query("EXPLAIN " + time_group_metric_sql)
        plan = "\n".join(str(r[1]) for r in plan)
        assert "CubeScan: cube=graf_hourly" in plan, plan
        _, got = db.query("SELECT queries_answered FROM system.cubes WHERE name = 'graf_hourly'")
        assert got == [(1,)], got
        _, plan = db.query(f"""EXPLAIN SELECT floor(extract(epoch from ts)/60)*60 AS "time", avg(v)
FROM graf WHERE {time_filter} GROUP BY 1""")
        plan = "\n".join(str(r[1]) for r in plan)
        assert "cube graf_hourly: group key floor(" in plan and "CubeScan" not in plan, plan
        time_group_alias()

    check("a cube of hours answers $__timeGroup(ts,'1h'), not '1m'", cube_answers_time_group)

    finish()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
