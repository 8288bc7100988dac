"""Session isolation: one connection's SET of a DataFusion option is seen
by that connection only (the other still shows the default), over the
simple (psycopg's execute without prepare) and the extended protocol;
with authentication off, current_user is the name each connection gave,
and no SET changes it.

Usage: python3 session_check.py PG_PORT HTTP_PORT
"""
import sys

import psycopg

NAME = "datafusion.execution.batch_size"


def show(conn, prepare):
    return conn.execute(f"SHOW {NAME}", prepare=prepare).fetchone()[-1]


def main(port: int) -> None:
    def connect(user="postgres"):
        return psycopg.connect(
            host="127.0.0.1", port=port, user=user, dbname="postgres",
            autocommit=True, connect_timeout=10,
        )

    alice, bob = connect("alice"), connect("bob")
    for prepare in (False, True, True, True, True, True, True):
        cur = alice.execute("SELECT current_user", prepare=prepare)
        assert cur.fetchone() == ("alice",), prepare
        assert cur.description[0].name == "current_user", cur.description
        assert bob.execute("SELECT current_user", prepare=prepare).fetchone() == ("bob",)
    for setting in ("kiln.session_user", "kiln.user"):
        try:
            bob.execute(f"SET {setting} = 'alice'")
            raise AssertionError(f"SET {setting} accepted")
        except psycopg.Error as e:
            assert e.sqlstate in ("42601", "42704"), e.sqlstate
    assert bob.execute("SELECT session_user").fetchone() == ("bob",)
    # A setting fixed when the server was built is refused, not ignored.
    for prepare in (False, True):
        try:
            bob.execute("SET server_version = '1.0'", prepare=prepare)
            raise AssertionError("SET server_version accepted")
        except psycopg.Error as e:
            assert e.sqlstate == "55P02", e.sqlstate
            assert 'parameter "server_version" cannot be changed' in str(e), str(e)
    assert bob.execute("SHOW server_version").fetchone() == ("16.6",)

    a, b = connect(), connect()
    default = show(b, False)
    assert default == "8192", default
    a.execute(f"SET {NAME} = 1234")
    assert show(a, False) == "1234", show(a, False)
    assert show(a, True) == "1234", show(a, True)
    assert show(b, False) == default, show(b, False)
    assert show(b, True) == default, show(b, True)
    # The option is applied to a's queries: still correct results.
    n = a.execute("SELECT count(*) FROM generate_series(1, 5000)").fetchone()[0]
    assert n == 5000, n
    # RESET returns to the server's value.
    a.execute(f"RESET {NAME}")
    assert show(a, False) == default, show(a, False)
    a.execute(f"SET {NAME} = 1234")
    # A new connection starts from the default too.
    c = connect()
    assert show(c, False) == default, show(c, False)
    # An unknown option is an error, a server-wide one refused.
    try:
        a.execute("SET datafusion.no_such.option = 1")
        raise AssertionError("unknown option accepted")
    except psycopg.Error as e:
        assert e.sqlstate in ("42601", "42704"), e.sqlstate
    try:
        a.execute("SET datafusion.runtime.memory_limit = '1G'")
        raise AssertionError("runtime option accepted")
    except psycopg.Error as e:
        assert e.sqlstate == "42501", e.sqlstate
    # SET timezone (DataFusion's alias of its time_zone option) too.
    tz = "datafusion.execution.time_zone"
    before = b.execute(f"SHOW {tz}").fetchone()[-1]
    a.execute("SET timezone = 'Europe/Paris'")
    assert a.execute(f"SHOW {tz}").fetchone()[-1] == "Europe/Paris"
    assert b.execute(f"SHOW {tz}").fetchone()[-1] == before
    # statement_timeout stays per session.
    a.execute("SET statement_timeout = '123ms'")
    assert a.execute("SHOW statement_timeout").fetchone()[0] == "123ms"
    assert b.execute("SHOW statement_timeout").fetchone()[0] != "123ms"
    print("ok")


if __name__ == "__main__":
    main(int(sys.argv[1]))
