"""Kiln over the PostgreSQL wire with psycopg 3 (a real client library):
DDL and INSERT, binary COPY TO and back, server-side prepared statements with parameters executed
repeatedly (constant ones planned once, the rest at every execution),
SQLSTATE-typed errors, and a long query cancelled with the
protocol's CancelRequest, after which the connection keeps serving and
system.queries shows the query as cancelled.

Usage: python3 psycopg_check.py PORT   (prints "ok" and exits 0 on success)
"""
import sys
import threading
import time
from datetime import datetime, timedelta

import psycopg

LONG = "SELECT count(*) FROM generate_series(1, 1000000000000)"


def main(port: int) -> None:
    conn = psycopg.connect(
        host="127.0.0.1", port=port, user="postgres", dbname="postgres",
        autocommit=True, connect_timeout=10,
    )
    c = conn.cursor()
    c.execute("CREATE TABLE pgt (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL, name VARCHAR)")
    c.execute(
        "INSERT INTO pgt VALUES ('2026-05-01 00:00:00', 1, 'a'), "
        "('2026-05-02 00:00:00', 2, 'b'), ('2026-05-03 00:00:00', 3, NULL)"
    )

    # Server-side prepared statements: Parse once, Bind/Execute many times.
    for i in (1, 2, 3, 1, 2):
        c.execute("SELECT id, name FROM pgt WHERE id = %s", (i,), prepare=True)
        rows = c.fetchall()
        assert [r[0] for r in rows] == [i], rows
    c.execute("SELECT name FROM pgt WHERE id = %s", (3,), prepare=True)
    assert c.fetchall() == [(None,)]
    for lo, want in ((datetime(2026, 5, 2), 2), (datetime(2026, 5, 3), 1)):
        c.execute(
            "SELECT count(*) FROM pgt WHERE ts >= %s AND ts < %s",
            (lo, datetime(2026, 5, 4)),
            prepare=True,
        )
        assert c.fetchone()[0] == want

    # A NULL interval arrives as NULL (not 00:00:00), in text and binary.
    for binary in (False, True):
        c.execute(
            "SELECT id, CASE WHEN id = 2 THEN NULL ELSE id * INTERVAL '1 hour' END "
            "FROM pgt ORDER BY id", binary=binary,
        )
        got = [(r[0], r[1]) for r in c.fetchall()]
        assert got == [(1, timedelta(hours=1)), (2, None), (3, timedelta(hours=3))], (binary, got)

    # PostgreSQL's default column labels, over the simple protocol (no
    # parameters), the extended one (parameters; prepared and not) and a
    # server-side cursor's Describe: pandas and Grafana name columns by them.
    labeled = ("SELECT count(*), count(name), 'x', CAST(2.0 AS INT), 1::int, "
               "date_trunc('day', ts), CASE WHEN id > 1 THEN 1 END, * FROM pgt "
               "WHERE id {} GROUP BY ts, id, name ORDER BY id LIMIT 1")
    want = ["count", "count", "?column?", "int4", "int4", "date_trunc", "case",
            "ts", "id", "name"]
    for sql, params, prepare in ((labeled.format("> 0"), None, False),
                                 (labeled.format("> %s"), (0,), False),
                                 (labeled.format("> %s"), (0,), True)):
        c.execute(sql, params, prepare=prepare)
        assert [d.name for d in c.description] == want, (sql, c.description)
        assert c.fetchone()[:5] == (1, 1, "x", 2, 1)
    with conn.transaction(), conn.cursor(name="labels") as named:
        named.execute(labeled.format("> %s"), (0,))
        assert named.fetchone()[:2] == (1, 1)
        assert [d.name for d in named.description] == want, named.description

    # A cast of a column beside the column (DataFusion names both alike),
    # over both protocols and prepared.
    for sql, params, prepare in (("SELECT CAST(id AS INT), id FROM pgt WHERE id > 0 ORDER BY id",
                                  None, False),
                                 ("SELECT id::text, id FROM pgt WHERE id > %s ORDER BY id",
                                  (0,), False),
                                 ("SELECT id::text, id FROM pgt WHERE id > %s ORDER BY id",
                                  (0,), True)):
        c.execute(sql, params, prepare=prepare)
        got = c.fetchall()
        assert [tuple(str(v) for v in r) for r in got] == [("1", "1"), ("2", "2"), ("3", "3")], (sql, got)

    # Correlated scalar subqueries in a select list are answered, not NULL
    # (an aggregate one, and one picking its first row by an order), over
    # the simple protocol, the extended one, and prepared.
    correlated = ("SELECT id, (SELECT q.name FROM pgt q WHERE q.id = p.id + {} "
                  "ORDER BY q.ts DESC LIMIT 1) AS next_name, (SELECT count(*) FROM pgt q "
                  "WHERE q.id = p.id) AS n FROM pgt p ORDER BY id")
    for sql, params, prepare in ((correlated.format("1"), None, False),
                                 (correlated.format("%s"), (1,), False),
                                 (correlated.format("%s"), (1,), True)):
        c.execute(sql, params, prepare=prepare)
        got = c.fetchall()
        assert got == [(1, "b", 1), (2, None, 1), (3, None, 1)], (sql, got)
    c.execute(correlated.format("%s"), (-1,), prepare=True)
    assert c.fetchall() == [(1, None, 1), (2, "a", 1), (3, "b", 1)]
    # One that neither aggregates nor sorts: its row's value, as over HTTP
    # (datafusion-postgres's rule would answer NULL).
    plain = "SELECT id, (SELECT q.name FROM pgt q WHERE q.id = p.id + {}) AS n FROM pgt p ORDER BY id"
    for sql, params, prepare in ((plain.format("1"), None, False),
                                 (plain.format("%s"), (1,), False),
                                 (plain.format("%s"), (1,), True)):
        c.execute(sql, params, prepare=prepare)
        got = c.fetchall()
        assert got == [(1, "b"), (2, None), (3, None)], (sql, got)

    # COPY TO STDOUT in the binary format, read by psycopg's own decoder,
    # and fed back through binary COPY FROM into a second table.
    out = ("COPY (SELECT ts, id, name, id > 1 AS big, id * 0.5 AS half FROM pgt "
           "ORDER BY id) TO STDOUT (FORMAT binary)")
    with c.copy(out) as cp:
        cp.set_types(["timestamp", "int8", "text", "bool", "float8"])
        got = list(cp.rows())
    want = [(datetime(2026, 5, 1), 1, "a", False, 0.5),
            (datetime(2026, 5, 2), 2, "b", True, 1.0),
            (datetime(2026, 5, 3), 3, None, True, 1.5)]
    assert got == want, got
    with c.copy(out) as cp:
        raw = b"".join(bytes(b) for b in cp)
    assert raw.startswith(b"PGCOPY\n\xff\r\n\x00") and raw.endswith(b"\xff\xff"), raw[:16]
    c.execute("CREATE TABLE pgt_copy (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL, "
              "name VARCHAR, big BOOLEAN, half DOUBLE)")
    with c.copy("COPY pgt_copy FROM STDIN (FORMAT binary)") as cp:
        cp.write(raw)
    c.execute("SELECT ts, id, name, big, half FROM pgt_copy ORDER BY id")
    assert c.fetchall() == want

    # Errors carry SQLSTATEs that client libraries turn into typed exceptions.
    try:
        c.execute("SELECT * FROM nope")
        raise AssertionError("unknown table accepted")
    except psycopg.errors.UndefinedTable:
        pass

    # CancelRequest stops a long query while it computes its rows.
    def cancel_soon() -> None:
        time.sleep(1.0)
        conn.cancel_safe()

    t = threading.Thread(target=cancel_soon)
    t.start()
    started = time.monotonic()
    try:
        c.execute(LONG)
        raise AssertionError("long query was not cancelled")
    except psycopg.errors.QueryCanceled:
        pass
    t.join()
    elapsed = time.monotonic() - started
    assert elapsed < 30, f"cancel took {elapsed:.1f}s"

    # The connection and the server keep serving.
    c.execute("SELECT count(*) FROM pgt")
    assert c.fetchone()[0] == 3
    c.execute(
        "SELECT status, protocol, session IS NOT NULL FROM system.queries "
        "WHERE query = %s",
        (LONG,),
    )
    got = c.fetchall()
    assert got == [("cancelled", "pg", True)], got

    # A constant prepared statement is planned once and re-executed; one
    # reading the clock or a table is planned at every Execute.
    for _ in range(3):
        c.execute("SELECT 1 AS one, 'x' || 'y' AS s", prepare=True)
        assert c.fetchall() == [(1, "xy")]
    c.execute("SELECT now()", prepare=True)
    first = c.fetchone()[0]
    time.sleep(0.01)
    c.execute("SELECT now()", prepare=True)
    assert c.fetchone()[0] > first
    c.execute("SELECT count(*) FROM pgt", prepare=True)
    assert c.fetchone()[0] == 3
    c.execute("INSERT INTO pgt VALUES ('2026-05-04 00:00:00', 4, 'd')")
    c.execute("SELECT count(*) FROM pgt", prepare=True)
    assert c.fetchone()[0] == 4

    # Past the trials of custom and generic plans: whichever kind runs,
    # each execution uses its own values and sees the rows written before it.
    for i in range(12):
        c.execute("INSERT INTO pgt VALUES ('2026-05-05 00:00:00', %s, 'g')", (100 + i,))
        c.execute(
            "SELECT count(*), max(id) FROM pgt WHERE id >= %s AND name = %s",
            (100, "g"),
            prepare=True,
        )
        assert c.fetchone() == (i + 1, 100 + i)
        c.execute("SELECT name FROM pgt WHERE id = %s", (100 + i,), prepare=True)
        assert c.fetchall() == [("g",)]
        c.execute("SELECT name FROM pgt WHERE id = %s", (1,), prepare=True)
        assert c.fetchall() == [("a",)]

    # A parameter only a function's argument types (typed as the argument,
    # so the statement's generic plan can be kept): each execution has its
    # own value's answer, as the same text with the value written in.
    counts = []
    for day in (1, 3, 5, 6, 2, 4) * 2:
        c.execute(
            "SELECT count(*) FROM pgt WHERE ts >= make_date(2026, 5, %s)",
            (day,),
            prepare=True,
        )
        got = c.fetchone()[0]
        c.execute(f"SELECT count(*) FROM pgt WHERE ts >= make_date(2026, 5, {day})")
        assert got == c.fetchone()[0], (day, got)
        counts.append(got)
    assert counts[:6] == [16, 14, 12, 0, 15, 13], counts
    assert counts[6:] == counts[:6], counts
    conn.close()
    print("ok")


if __name__ == "__main__":
    main(int(sys.argv[1]))
