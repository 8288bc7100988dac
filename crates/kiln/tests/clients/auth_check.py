"""Authentication and privileges through psycopg 3 (libpq's SCRAM-SHA-256,
statements over the extended protocol). The server runs with --auth on and
the admin password given as the third argument; prints "ok" when every
check passes.

Usage: python3 auth_check.py PG_PORT HTTP_PORT ADMIN_PASSWORD
"""
import sys

import psycopg


def connect(port, user, password):
    return psycopg.connect(
        host="127.0.0.1", port=port, user=user, password=password,
        dbname="kiln", autocommit=True, connect_timeout=10, sslmode="disable",
    )


def refused(port, user, password):
    try:
        connect(port, user, password).close()
    except psycopg.OperationalError as e:
        assert "password authentication failed" in str(e), e
        assert password not in str(e), e
        return
    raise AssertionError(f"{user} logged in with a wrong password")


def sqlstate(conn, sql):
    try:
        conn.execute(sql, prepare=True)
    except psycopg.Error as e:
        return e.sqlstate
    return None


def main(port, admin_password):
    refused(port, "admin", admin_password + "x")
    refused(port, "nobody", admin_password)

    admin = connect(port, "admin", admin_password)
    admin.execute("CREATE TABLE py_events (ts TIMESTAMP NOT NULL, v BIGINT)")
    admin.execute("INSERT INTO py_events VALUES (now(), 1)")
    # Account statements over the extended protocol (Parse, Describe, Execute).
    admin.execute("CREATE USER py_reader WITH PASSWORD 'reader pw'", prepare=True)
    admin.execute("GRANT SELECT ON py_events TO py_reader", prepare=True)
    cur = admin.execute("CREATE TOKEN py_token FOR py_reader EXPIRES IN '1h'", prepare=True)
    assert [c.name for c in cur.description] == ["name", "user", "token", "expires_at"], cur.description
    row = cur.fetchone()
    assert row[0] == "py_token" and row[1] == "py_reader" and row[2].startswith("kiln_"), row
    users = {r[0]: r[1] for r in admin.execute("SHOW USERS").fetchall()}
    assert users == {"admin": True, "py_reader": False}, users

    reader = connect(port, "py_reader", "reader pw")
    assert reader.execute("SELECT count(*) FROM py_events").fetchone()[0] == 1
    # current_user is each session's own, prepared and run past the
    # plan cache's trials on both sessions alike.
    for _ in range(12):
        for conn, name in [(reader, "py_reader"), (admin, "admin")]:
            row = conn.execute("SELECT current_user, session_user", prepare=True).fetchone()
            assert row == (name, name), (name, row)
            row = conn.execute(
                "SELECT count(*) FROM py_events WHERE current_user = %s", [name], prepare=True
            ).fetchone()
            assert row == (1,), (name, row)
    assert sqlstate(reader, "INSERT INTO py_events VALUES (now(), 2)") == "42501"
    assert sqlstate(reader, "CREATE TABLE py_x (ts TIMESTAMP NOT NULL)") == "42501"
    assert sqlstate(reader, "DROP TABLE py_events") == "42501"
    assert sqlstate(reader, "CREATE USER py_evil PASSWORD 'x'") == "42501"
    assert sqlstate(reader, "GRANT ALL ON ALL TABLES TO py_reader") == "42501"
    # A REVOKE applies to the open session at its next statement.
    admin.execute("REVOKE SELECT ON py_events FROM py_reader")
    assert sqlstate(reader, "SELECT count(*) FROM py_events") == "42501"
    admin.execute("GRANT SELECT, INSERT ON ALL TABLES TO py_reader")
    reader.execute("INSERT INTO py_events VALUES (now(), 2)", prepare=True)
    assert reader.execute("SELECT count(*) FROM py_events").fetchone()[0] == 2
    # A user changes their own password, and only that.
    reader.execute("ALTER USER py_reader PASSWORD 'new reader pw'")
    assert sqlstate(reader, "ALTER USER py_reader SUPERUSER") == "42501"
    reader.close()
    refused(port, "py_reader", "reader pw")
    connect(port, "py_reader", "new reader pw").close()

    # No password shows in system.queries.
    texts = [r[0] for r in admin.execute("SELECT query FROM system.queries").fetchall()]
    assert any("CREATE USER py_reader" in t for t in texts), texts
    assert not any("reader pw" in t for t in texts), texts
    print("ok")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[3])
