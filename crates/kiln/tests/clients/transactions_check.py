"""Transactions that do not lie, driven by psycopg 3 (autocommit off, as
its default): ROLLBACK discards INSERTs and COPYs, COMMIT makes them
visible at once, an error aborts the transaction (25P02 until it ends,
nothing written), savepoints mark what ROLLBACK TO drops (also after an
error, which it resumes from), a second table is refused with 0A000, and the session resets pooled clients send
(DEALLOCATE ALL, DISCARD ALL, RESET ALL) work; isolation levels past
read committed are refused (0A000), and read-only transactions and
sessions refuse writes (25006).

Usage: python3 transactions_check.py PORT   (prints "ok" on success)
"""
import sys

import psycopg


def count(conn, table="tx"):
    with psycopg.connect(conn.info.dsn, autocommit=True) as other:
        return other.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def sqlstate(conn, sql):
    try:
        conn.execute(sql)
    except psycopg.Error as e:
        return e.sqlstate
    raise AssertionError(f"{sql} did not fail")


def main(port):
    dsn = f"host=127.0.0.1 port={port} user=kiln dbname=kiln connect_timeout=10"
    admin = psycopg.connect(dsn, autocommit=True)
    admin.execute("CREATE TABLE tx (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL, name VARCHAR)")
    admin.execute("CREATE TABLE tx2 (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL)")

    conn = psycopg.connect(dsn)  # autocommit off: psycopg sends BEGIN itself
    ins = "INSERT INTO tx VALUES ('2026-01-01 00:00:00', %s, %s)"

    # ROLLBACK discards, over the extended protocol with parameters.
    conn.execute(ins, (1, "a"))
    conn.cursor().executemany(ins, [(2, "b"), (3, "c")])
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    assert count(conn) == 0, "staged rows are not visible before COMMIT"
    conn.rollback()
    assert count(conn) == 0, "ROLLBACK kept rows"

    # COMMIT writes them all, visible at once.
    conn.execute(ins, (1, "a"))
    conn.cursor().executemany(ins, [(2, "b"), (3, "c")])
    conn.commit()
    assert count(conn) == 3

    # COPY inside a transaction follows it too.
    with conn.cursor().copy("COPY tx (ts, id, name) FROM STDIN") as cp:
        cp.write_row(("2026-01-02 00:00:00", 10, "copied"))
    conn.rollback()
    assert count(conn) == 3, "ROLLBACK kept a COPY"
    with conn.cursor().copy("COPY tx (ts, id, name) FROM STDIN") as cp:
        cp.write_row(("2026-01-02 00:00:00", 10, "copied"))
    conn.commit()
    assert count(conn) == 4

    # An error aborts the transaction: nothing of it is written.
    conn.execute(ins, (20, "x"))
    assert sqlstate(conn, "INSERT INTO tx VALUES ('2026-01-01', NULL, 'null id')") == "23502"
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
    assert sqlstate(conn, "SELECT 1") == "25P02"
    conn.commit()  # ends it; PostgreSQL (and Kiln) roll an aborted transaction back
    assert count(conn) == 4, "an aborted transaction wrote rows"

    # Savepoints: ROLLBACK TO drops what came after, also after an error.
    conn.execute(ins, (30, "kept"))
    conn.execute("SAVEPOINT s1")
    conn.execute(ins, (31, "dropped"))
    conn.execute("ROLLBACK TO SAVEPOINT s1")
    conn.execute("SAVEPOINT s2")
    assert sqlstate(conn, "INSERT INTO tx VALUES ('2026-01-01', NULL, 'bad')") == "23502"
    conn.execute("ROLLBACK TO SAVEPOINT s2")
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    # The same over the extended protocol (as pgjdbc sends it).
    conn.execute("SAVEPOINT s3", prepare=True)
    assert sqlstate(conn, "INSERT INTO tx VALUES ('2026-01-01', NULL, 'bad')") == "23502"
    conn.execute("ROLLBACK TO SAVEPOINT s3", prepare=True)
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    conn.execute(ins, (32, "kept too"))
    conn.execute("RELEASE SAVEPOINT s1")
    assert sqlstate(conn, "ROLLBACK TO SAVEPOINT s1") == "3B001"
    conn.rollback()
    conn.execute(ins, (30, "kept"))
    with conn.transaction():  # psycopg's nested block: a savepoint
        conn.execute(ins, (31, "inner"))
    try:
        with conn.transaction():
            conn.execute(ins, (33, "inner, rolled back"))
            raise RuntimeError
    except RuntimeError:
        pass
    conn.commit()
    with psycopg.connect(dsn, autocommit=True) as other:
        ids = [r[0] for r in other.execute("SELECT id FROM tx WHERE id >= 30 ORDER BY id")]
    assert ids == [30, 31], ids
    with psycopg.connect(dsn, autocommit=True) as other:
        assert sqlstate(other, "SAVEPOINT outside") == "25P01"

    # A second table is refused, never half-applied.
    conn.execute(ins, (34, "z"))
    assert sqlstate(conn, "INSERT INTO tx2 VALUES ('2026-01-01', 1)") == "0A000"
    conn.rollback()
    assert count(conn) == 6 and count(conn, "tx2") == 0

    # Reads inside a transaction work and see committed rows.
    assert conn.execute("SELECT count(*) FROM tx").fetchone()[0] == 6
    conn.commit()

    # Session resets of pooled clients.
    conn.autocommit = True
    for _ in range(6):  # psycopg prepares a statement after 5 executions
        conn.execute("SELECT id FROM tx WHERE id = %s", (1,)).fetchall()
    conn.execute("DEALLOCATE ALL")
    assert conn.execute("SELECT id FROM tx WHERE id = %s", (1,)).fetchone()[0] == 1
    conn.execute("SET statement_timeout = 1234")
    assert conn.execute("SHOW statement_timeout").fetchone()[0] == "1234ms"
    conn.execute("RESET ALL")
    assert conn.execute("SHOW statement_timeout").fetchone()[0] == "0"
    conn.execute("SET statement_timeout = 1234")
    conn.execute("DISCARD ALL")
    assert conn.execute("SHOW statement_timeout").fetchone()[0] == "0"

    # psql-style: several statements in one simple query.
    conn.execute("BEGIN; INSERT INTO tx VALUES ('2026-01-03', 40, 'one string'); ROLLBACK",
                 prepare=False)
    assert count(conn) == 6, "a rolled-back simple query wrote rows"

    # Isolation: read committed (and read uncommitted, which PostgreSQL
    # runs as read committed) are taken; stronger levels are refused.
    iso = psycopg.connect(dsn)
    iso.isolation_level = psycopg.IsolationLevel.SERIALIZABLE
    try:
        iso.execute("SELECT 1")
        raise AssertionError("BEGIN ISOLATION LEVEL SERIALIZABLE accepted")
    except psycopg.errors.FeatureNotSupported as e:
        assert "read committed" in str(e), e
    iso.rollback()
    iso.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
    assert iso.execute("SHOW transaction_isolation").fetchone()[0] == "read committed"
    iso.rollback()
    iso.autocommit = True
    iso.execute("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ UNCOMMITTED")
    assert iso.execute("SHOW default_transaction_isolation").fetchone()[0] == "read uncommitted"
    assert iso.execute("SHOW TRANSACTION ISOLATION LEVEL").fetchone()[0] == "read uncommitted"
    assert sqlstate(iso, "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL "
                         "REPEATABLE READ") == "0A000"

    # Read-only transactions and sessions refuse writes (25006), both
    # protocols, and nothing is written; reads go on.
    ro = psycopg.connect(dsn)
    ro.read_only = True  # psycopg sends BEGIN READ ONLY
    assert ro.execute("SELECT count(*) FROM tx").fetchone()[0] == 6
    try:
        ro.execute(ins, (50, "ro"))
        raise AssertionError("INSERT in a read-only transaction accepted")
    except psycopg.errors.ReadOnlySqlTransaction as e:
        assert "cannot execute INSERT in a read-only transaction" in str(e), e
    ro.rollback()
    ro.read_only = None
    ro.autocommit = True
    ro.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    assert ro.execute("SHOW transaction_read_only").fetchone()[0] == "on"
    for sql in ("INSERT INTO tx VALUES ('2026-01-03', 51, 'ro')", "CREATE TABLE ro (a BIGINT)",
                "DROP TABLE tx2", "CREATE CUBE ro_c ON tx DIMENSIONS (id) MEASURES (count(*))"):
        assert sqlstate(ro, sql) == "25006", sql
    try:
        with ro.cursor().copy("COPY tx (ts, id, name) FROM STDIN") as cp:
            cp.write_row(("2026-01-03", 52, "ro"))
        raise AssertionError("COPY in a read-only session accepted")
    except psycopg.errors.ReadOnlySqlTransaction:
        pass
    assert ro.execute("SELECT count(*) FROM tx").fetchone()[0] == 6
    ro.execute("RESET ALL")
    assert ro.execute("SHOW transaction_read_only").fetchone()[0] == "off"
    ro.execute("INSERT INTO tx VALUES ('2026-01-03', 53, 'rw')")
    assert count(conn) == 7
    print("ok")


if __name__ == "__main__":
    main(int(sys.argv[1]))
