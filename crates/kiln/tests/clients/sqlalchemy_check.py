"""SQLAlchemy 2 over psycopg 3 (what Superset and pandas use): the engine
connects (it parses version()), reads the server's settings and whether
it is a standby (`pg_is_in_recovery()`, as health checks ask), runs
parameterized queries, commits and rolls back through its own
transaction handling, and returns connections to its pool (which sends
ROLLBACK, and psycopg DEALLOCATE ALL) without breaking them.

Usage: python3 sqlalchemy_check.py PORT   (prints "ok" on success)
"""
import sys

import sqlalchemy as sa


def main(port):
    engine = sa.create_engine(
        f"postgresql+psycopg://kiln@127.0.0.1:{port}/kiln", pool_size=1, max_overflow=0
    )
    with engine.connect() as c:
        assert engine.dialect.server_version_info[:2] == (16, 6), engine.dialect.server_version_info
        assert c.execute(sa.text("SHOW standard_conforming_strings")).scalar() == "on"
        assert c.execute(sa.text("SELECT current_setting('server_version_num')")).scalar() == "160006"
        assert c.execute(sa.text("SELECT pg_is_in_recovery()")).scalar() is False
        c.execute(sa.text("CREATE TABLE sa_t (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL, v DOUBLE)"))
        c.commit()

    rows = [{"id": i, "v": i / 2} for i in range(1, 11)]
    insert = sa.text("INSERT INTO sa_t VALUES ('2026-02-01 00:00:00', :id, :v)")
    with engine.begin() as c:  # commits at the end of the block
        c.execute(insert, rows)
    try:
        with engine.begin() as c:
            c.execute(insert, [{"id": 99, "v": 0.0}])
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    # The same pooled connection, reused many times (pool_size=1).
    for _ in range(8):
        with engine.connect() as c:
            got = c.execute(sa.text("SELECT count(*), sum(v) FROM sa_t WHERE id <= :n"), {"n": 10}).one()
            assert tuple(got) == (10, 27.5), got
    with engine.connect() as c:
        assert c.execute(sa.text("SELECT count(*) FROM sa_t WHERE id = 99")).scalar() == 0
    # Superset's time filter on a PostgreSQL database (its engine spec's
    # convert_dttm): TO_TIMESTAMP and TO_DATE with PostgreSQL's templates.
    window = (
        "SELECT count(*) FROM sa_t WHERE ts >= TO_TIMESTAMP('{} 00:00:00.000000', "
        "'YYYY-MM-DD HH24:MI:SS.US') AND ts < TO_TIMESTAMP('{} 00:00:00.000000', "
        "'YYYY-MM-DD HH24:MI:SS.US') AND ts >= TO_DATE('2026-01-31', 'YYYY-MM-DD')"
    )
    with engine.connect() as c:
        for day, n in (("2026-02-01", 10), ("2026-02-02", 0)):
            got = c.execute(sa.text(window.format(day, "2026-02-03"))).scalar()
            assert got == n, (day, got)
    print("ok")


if __name__ == "__main__":
    main(int(sys.argv[1]))
