"""Server-side cursors: psycopg 3 named cursors (DECLARE, Describe of the
cursor's portal, FETCH FORWARD n over the extended protocol, CLOSE), in
text and binary (psycopg's binary=True: each FETCH's Bind asks for binary
rows; DECLARE ... BINARY over the simple protocol),
SQL-level DECLARE/FETCH/CLOSE over the simple protocol, and SQLAlchemy's
stream_results (pandas' chunked reads), with results checked. The
cursor's query goes through the engine's door (system.queries lists it).

Usage: python3 cursors_check.py PORT   (prints "ok" on success)
"""
import datetime
import sys

import psycopg
import sqlalchemy as sa


def main(port):
    dsn = f"host=127.0.0.1 port={port} user=kiln dbname=kiln"
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("CREATE TABLE cur (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL, name VARCHAR)")
    conn.execute("INSERT INTO cur SELECT TIMESTAMP '2026-03-01 00:00:00', v, 'n' || v "
                 "FROM generate_series(1, 10000) g(v)")

    # psycopg named cursor: described columns, rows in chunks.
    with psycopg.connect(dsn) as c:
        with c.cursor(name="big") as cur:
            cur.itersize = 1000
            cur.execute("SELECT id, name FROM cur ORDER BY id")
            assert [d.name for d in cur.description] == ["id", "name"], cur.description
            first = cur.fetchmany(3)
            assert first == [(1, "n1"), (2, "n2"), (3, "n3")], first
            rest = list(cur)
            assert len(rest) == 9997 and rest[-1] == (10000, "n10000"), rest[-1]
        c.commit()
        # Binary rows, each type decoded as psycopg decodes it: the same
        # values as text rows.
        sql = ("SELECT id, id * 2.5 AS d, name, ts + id * INTERVAL '1 hour' AS t, "
               "id % 2 = 0 AS even, CAST(NULL AS BIGINT) AS none FROM cur "
               "WHERE id <= 2500 ORDER BY id")
        fetched = {}
        for binary in (False, True):
            with c.cursor(name=f"typed_{binary}", binary=binary) as cur:
                cur.execute(sql)
                fetched[binary] = cur.fetchmany(7) + cur.fetchmany(1000) + cur.fetchall()
        c.commit()
        assert len(fetched[True]) == 2500, len(fetched[True])
        assert fetched[True] == fetched[False], (fetched[True][:2], fetched[False][:2])
        assert fetched[True][0] == (1, 2.5, "n1", datetime.datetime(2026, 3, 1, 1), False, None), fetched[True][0]

    # DECLARE ... BINARY over the simple protocol: binary rows.
    conn.execute("BEGIN")
    conn.execute("DECLARE b1 BINARY CURSOR FOR SELECT CAST(id AS INT) AS i FROM cur WHERE id = 258")
    res = conn.pgconn.exec_(b"FETCH 1 FROM b1")
    assert res.fformat(0) == 1 and res.get_value(0, 0) == (258).to_bytes(4, "big"), res.get_value(0, 0)
    conn.execute("CLOSE b1")
    conn.execute("COMMIT")

    # SQL cursors over the simple protocol.
    conn.execute("DECLARE c1 CURSOR FOR SELECT id FROM cur WHERE id <= 5 ORDER BY id")
    got = conn.execute("FETCH 2 FROM c1", prepare=False).fetchall()
    assert got == [(1,), (2,)], got
    got = conn.execute("FETCH ALL FROM c1", prepare=False).fetchall()
    assert got == [(3,), (4,), (5,)], got
    assert conn.execute("FETCH 2 FROM c1", prepare=False).fetchall() == []
    conn.execute("CLOSE c1")
    try:
        conn.execute("FETCH 1 FROM c1", prepare=False)
        raise AssertionError("FETCH from a closed cursor")
    except psycopg.Error as e:
        assert e.sqlstate == "34000", e.sqlstate
    texts = [r[0] for r in conn.execute("SELECT query FROM system.queries")]
    assert any("WHERE id <= 5" in t for t in texts), texts

    # SQLAlchemy stream_results: a server-side cursor read in partitions.
    engine = sa.create_engine(f"postgresql+psycopg://kiln@127.0.0.1:{port}/kiln")
    with engine.connect() as c:
        result = c.execution_options(stream_results=True, max_row_buffer=500).execute(
            sa.text("SELECT id FROM cur WHERE id % 7 = 0 ORDER BY id"))
        ids = [row.id for part in result.partitions(100) for row in part]
    assert ids == list(range(7, 10001, 7)), (len(ids), ids[:3])
    print("ok")


if __name__ == "__main__":
    main(int(sys.argv[1]))
