"""SQLAlchemy 2's inspector (what Superset, Alembic, pandas' to_sql and BI
tools' schema browsers call) and pandas reading through an engine, against
Kiln over psycopg 3.

Checks, with results asserted: sqlalchemy.inspect(engine).get_schema_names,
get_table_names, has_table, get_columns (types come back as SQLAlchemy's
TIMESTAMP, VARCHAR, DOUBLE_PRECISION, BIGINT, nullability), get_pk_constraint,
get_indexes, get_foreign_keys, get_unique_constraints, get_view_names;
Table(..., autoload_with=engine) reflection; pandas.read_sql through the
engine and with chunksize + stream_results.

Every check runs and its result goes to stderr. A check in KNOWN_GAPS
(below: what fails against Kiln today, and why) that fails is reported as
a known gap; one that passes fails the run, so the list stays true. Any
other failure fails the run: failures are listed at the end and the exit
code is 1.

Usage: python3 inspect_check.py PG_PORT HTTP_PORT   (prints "ok" on stdout
when every check passes or is a known gap; needs sqlalchemy>=2,
psycopg[binary], pandas)
"""
import sys
import time
import traceback
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pgt

# Checks that fail against Kiln today: name -> why. Strict: a listed check
# that passes fails the run ("now passes: remove it from KNOWN_GAPS").
KNOWN_GAPS = {}

FAILURES = []
RAN = set()


def describe(e):
    state = getattr(getattr(e, "orig", None), "sqlstate", None) or getattr(e, "sqlstate", None)
    msg = str(getattr(e, "orig", None) or e).strip().splitlines()
    first = msg[0] if msg else repr(e)
    if state:
        return f"{type(e).__name__}: {first} [SQLSTATE {state}]"
    return f"{type(e).__name__}: {first}"


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
        if not isinstance(e, (AssertionError, sa.exc.DBAPIError)):
            msg += " | " + traceback.format_exc().strip().splitlines()[-3].strip()
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


def main(pg_port, http_port):
    engine = sa.create_engine(f"postgresql+psycopg://kiln@127.0.0.1:{pg_port}/kiln")
    with engine.begin() as c:
        c.exec_driver_sql("DROP TABLE IF EXISTS insp_t")
        c.exec_driver_sql(
            "CREATE TABLE insp_t (ts TIMESTAMP NOT NULL, host VARCHAR, v DOUBLE, n BIGINT NOT NULL)"
        )
        c.exec_driver_sql(
            "INSERT INTO insp_t SELECT to_timestamp(1767225600 + v), "
            "'h' || (v %% 3), v / 4.0, v FROM generate_series(1, 10000) g(v)"
        )
    log("pass setup")

    # A fresh inspector per check: its cache would hide which call fails.
    def insp():
        return sa.inspect(engine)

    def schema_names():
        # SQLAlchemy sends nspname NOT LIKE 'pg/_%' ESCAPE '/'.
        names = insp().get_schema_names()
        assert "public" in names, names
        assert "pg_catalog" not in names and "information_schema" not in names, names

    check("get_schema_names", schema_names)

    def table_names():
        names = insp().get_table_names()
        assert "insp_t" in names, names
        names = insp().get_table_names(schema="public")
        assert "insp_t" in names, names

    check("get_table_names", table_names)

    def has_table():
        i = insp()
        assert i.has_table("insp_t") is True
        assert i.has_table("insp_nope") is False
        assert i.has_table("insp_t", schema="public") is True

    check("has_table", has_table)

    def view_names():
        names = insp().get_view_names()
        assert "insp_t" not in names, names

    check("get_view_names", view_names)

    def columns():
        # The same query serves get_multi_columns, Table(autoload_with=...),
        # MetaData.reflect and pandas.read_sql_table below.
        cols = insp().get_columns("insp_t")
        got = [(c["name"], type(c["type"]), c["nullable"]) for c in cols]
        # Kiln keeps one string type: VARCHAR and TEXT are the same column.
        want = [
            ("ts", pgt.TIMESTAMP, False),
            ("host", pgt.TEXT, True),
            ("v", pgt.DOUBLE_PRECISION, True),
            ("n", pgt.BIGINT, False),
        ]
        assert got == want, got
        assert cols[0]["type"].timezone is False, cols[0]["type"].timezone

    check("get_columns", columns)

    def pk():
        # SQLAlchemy unnests pg_constraint.conkey/pg_index.indkey.
        got = insp().get_pk_constraint("insp_t")
        assert got["constrained_columns"] == [], got

    check("get_pk_constraint", pk)

    def indexes():
        assert insp().get_indexes("insp_t") == []

    check("get_indexes", indexes)

    def fks():
        assert insp().get_foreign_keys("insp_t") == []

    check("get_foreign_keys", fks)

    def uniques():
        assert insp().get_unique_constraints("insp_t") == []

    check("get_unique_constraints", uniques)

    def check_constraints():
        assert insp().get_check_constraints("insp_t") == []

    check("get_check_constraints", check_constraints)

    def table_comment():
        assert insp().get_table_comment("insp_t")["text"] is None

    check("get_table_comment", table_comment)

    def multi_columns():
        # The batch form SQLAlchemy 2 uses for MetaData.reflect().
        got = insp().get_multi_columns()
        cols = got[(None, "insp_t")]
        assert [c["name"] for c in cols] == ["ts", "host", "v", "n"], cols

    check("get_multi_columns", multi_columns)

    def autoload():
        md = sa.MetaData()
        t = sa.Table("insp_t", md, autoload_with=engine)
        assert [c.name for c in t.columns] == ["ts", "host", "v", "n"], list(t.columns)
        with engine.connect() as c:
            got = c.execute(sa.select(sa.func.count(), sa.func.max(t.c.n)).where(t.c.v > 2)).one()
        assert tuple(got) == (9992, 10000), got

    check("Table(autoload_with=engine)", autoload)

    def reflect_all():
        md = sa.MetaData()
        md.reflect(bind=engine, only=["insp_t"])
        assert "insp_t" in md.tables, md.tables.keys()

    check("MetaData.reflect(only=[...])", reflect_all)

    def stream_params():
        # A server-side cursor (psycopg named cursor: DECLARE ... CURSOR FOR
        # ... with $1 bound over the extended protocol) with a parameter.
        with engine.connect().execution_options(stream_results=True, max_row_buffer=100) as c:
            r = c.execute(sa.text("SELECT n FROM insp_t WHERE n <= :hi ORDER BY n"), {"hi": 250})
            parts = [len(p) for p in r.partitions(100)]
        assert parts == [100, 100, 50], parts

    check("stream_results with a bound parameter", stream_params)

    try:
        import pandas as pd
    except ImportError:
        FAILURES.append("pandas: not installed (pip install pandas)")
        log("FAIL pandas not installed")
        pd = None

    if pd is not None:

        def read_sql():
            df = pd.read_sql(
                sa.text("SELECT ts, host, v, n FROM insp_t WHERE n <= :hi ORDER BY n"), engine, params={"hi": 5}
            )
            assert list(df.columns) == ["ts", "host", "v", "n"], df.columns
            assert len(df) == 5, df
            assert str(df["ts"].dtype).startswith("datetime64"), df.dtypes
            assert str(df["n"].dtype) == "int64", df.dtypes
            assert str(df["v"].dtype) == "float64", df.dtypes
            assert df["ts"].iloc[0] == pd.Timestamp(datetime(2026, 1, 1, 0, 0, 1)), df["ts"].iloc[0]
            assert df["n"].tolist() == [1, 2, 3, 4, 5]
            assert df["v"].tolist() == [0.25, 0.5, 0.75, 1.0, 1.25]
            assert df["host"].tolist() == ["h1", "h2", "h0", "h1", "h2"]

        check("pandas.read_sql(text, engine, params)", read_sql)

        def read_sql_table():
            df = pd.read_sql_table("insp_t", engine)
            assert len(df) == 10000 and list(df.columns) == ["ts", "host", "v", "n"], df

        check("pandas.read_sql_table (reflects the table)", read_sql_table)

        # pandas first asks has_table(<the SQL text>) on the same
        # stream_results connection, a parameterized query run as a named
        # cursor, then reads the real query through a named cursor.
        def read_sql_chunks():
            with engine.connect().execution_options(stream_results=True) as c:
                sizes = []
                total = 0
                for chunk in pd.read_sql("SELECT n, v FROM insp_t ORDER BY n", c, chunksize=3000):
                    sizes.append(len(chunk))
                    total += int(chunk["n"].sum())
            assert sizes == [3000, 3000, 3000, 1000], sizes
            assert total == 10000 * 10001 // 2, total

        check("pandas.read_sql(chunksize=3000, stream_results)", read_sql_chunks)

    finish()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
