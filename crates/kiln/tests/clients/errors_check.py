"""SQLSTATEs and messages as PostgreSQL gives them, identical over the
simple protocol, the extended protocol (psycopg prepare=True) and HTTP's
JSON `code`; no planner internals in messages. EXPLAIN's options (FORMAT
JSON, VERBOSE) are read by every door. A regular expression given
as a parameter that does not compile is bad input naming its parameter,
prepared or not, also once a prepared statement runs a kept plan.

Usage: python3 errors_check.py PG_PORT HTTP_PORT   (prints "ok" on success)
"""
import json
import sys
import urllib.error
import urllib.request

import psycopg

# statement, SQLSTATE, HTTP code, a word the message must contain
CASES = [
    ("SELEC 1", "42601", "syntax_error", "syntax error"),
    ("SELECT * FROM er WHERE", "42601", "syntax_error", "syntax error"),
    ("SELECT * FROM nope", "42P01", "table_not_found", "nope"),
    ("SELECT nope FROM er", "42703", "undefined_column", 'column "nope" does not exist'),
    ("SELECT er.nope FROM er", "42703", "undefined_column", "column er.nope does not exist"),
    ("SELECT nofunc(id) FROM er", "42883", "undefined_function", "function nofunc does not exist"),
    ("SELECT 1/0", "22012", "division_by_zero", "division by zero"),
    ("SELECT 1.0/0.0", "22012", "division_by_zero", "division by zero"),
    ("SELECT CAST('abc' AS INT)", "22P02", "invalid_data", "abc"),
    ("SELECT -CAST(-9223372036854775808 AS BIGINT)", "22003", "numeric_out_of_range", "overflow"),
    ("SELECT 9223372036854775807 + 1", "22003", "numeric_out_of_range", "overflow"),
    ("SELECT x * 2 FROM (VALUES (1), (4611686018427387904)) v(x)", "22003", "numeric_out_of_range",
     "overflow"),
    ("SELECT sum(x) FROM (VALUES (9223372036854775807), (1)) v(x)", "22003", "numeric_out_of_range",
     "integer sum out of range"),
    ("INSERT INTO er VALUES ('2026-01-01', NULL)", "23502", "not_null_violation", "id"),
    ("EXPLAIN (ANALYZE, COSTS OFF) SELECT 1", "42601", "syntax_error", "COSTS"),
    ("EXPLAIN (FORMAT YAML) SELECT 1", "42601", "syntax_error", "YAML"),
]

# EXPLAIN with options, a parameter bound: prepared and over HTTP, the
# same plan types, the first one this (the JSON one a plan as PostgreSQL
# lays it out)
EXPLAINS = [
    ("EXPLAIN (FORMAT JSON) SELECT count(*) FROM er WHERE id = %s", "logical_plan"),
    ("EXPLAIN (VERBOSE) SELECT count(*) FROM er WHERE id = %s", "initial_logical_plan"),
]

# a syntax error and where it lies (characters from 1), as psql's caret
# and psycopg's `diag.statement_position` show it
POSITIONS = [
    ("SELEC 1", 1),
    ("SELECT 1\nFROM er WHERE id = = 2", 29),
    ("SELECT 'é', 1 +* 2", 16),
]

# a pattern bound to a parameter: statement, a value that compiles, one
# that does not
BOUND = [
    ("SELECT count(*) FROM er WHERE CAST(id AS TEXT) ~ %s", "^[0-9]+$", "a("),
    ("SELECT regexp_replace('abc', 'b', 'x', %s)", "gi", "z"),
    ("SELECT count(*) FROM er WHERE CAST(id AS TEXT) SIMILAR TO %s", "(1|2)%", "[1"),
    # A pattern computed from the parameter.
    ("SELECT 'x1' ~ ('^' || %s)", "x[0-9]+$", "x("),
]

INTERNALS = ["Optimizer rule", "Arrow error", "Schema error", "Error during planning", "SQL error"]


def http(port, sql):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/sql", data=sql.encode(),
                                 headers={"Content-Type": "application/sql"})
    try:
        urllib.request.urlopen(req).read()
    except urllib.error.HTTPError as e:
        body = json.loads(e.read())["error"]
        return body["code"], body["message"], body.get("position")
    raise AssertionError(f"HTTP accepted {sql}")


def pg(conn, sql, prepare):
    try:
        conn.execute(sql, prepare=prepare)
    except psycopg.Error as e:
        position = e.diag.statement_position
        return e.sqlstate, e.diag.message_primary or str(e), position and int(position)
    raise AssertionError(f"accepted {sql} (prepare={prepare})")


def main(pg_port, http_port):
    conn = psycopg.connect(f"host=127.0.0.1 port={pg_port} user=kiln dbname=kiln",
                           autocommit=True)
    conn.execute("CREATE TABLE er (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL)")
    failures = []
    for sql, state, code, word in CASES:
        got = {
            "simple": pg(conn, sql, False),
            "extended": pg(conn, sql, True),
        }
        h_code, h_msg, _ = http(http_port, sql)
        for how, (s, msg, _) in got.items():
            if s != state:
                failures.append(f"{sql!r} over {how}: {s}, expected {state} ({msg})")
            if word not in msg or any(i in msg for i in INTERNALS):
                failures.append(f"{sql!r} over {how}: message {msg!r}")
        if h_code != code:
            failures.append(f"{sql!r} over HTTP: {h_code}, expected {code} ({h_msg})")
        if word not in h_msg or any(i in h_msg for i in INTERNALS):
            failures.append(f"{sql!r} over HTTP: message {h_msg!r}")
    for sql, position in POSITIONS:
        got = {
            "simple": pg(conn, sql, False)[2],
            "extended": pg(conn, sql, True)[2],
            "HTTP": http(http_port, sql)[2],
        }
        for how, p in got.items():
            if p != position:
                failures.append(f"{sql!r} over {how}: position {p}, expected {position}")
    for sql, good, bad in BOUND:
        for prepare in (False, True):
            # Enough runs for a prepared statement to keep a generic plan.
            for _ in range(8):
                conn.execute(sql, [good], prepare=prepare)
            try:
                conn.execute(sql, [bad], prepare=prepare)
                failures.append(f"{sql!r} accepted {bad!r} (prepare={prepare})")
            except psycopg.Error as e:
                msg = e.diag.message_primary or str(e)
                if e.sqlstate != "2201B" or "(parameter $1)" not in msg:
                    failures.append(f"{sql!r} with {bad!r} (prepare={prepare}): {e.sqlstate} {msg}")
        body = json.dumps({"sql": sql.replace("%s", "$1"), "params": [bad]}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{http_port}/v1/sql", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req).read()
            failures.append(f"{sql!r} accepted {bad!r} over HTTP")
        except urllib.error.HTTPError as e:
            err = json.loads(e.read())["error"]
            if err["code"] != "invalid_regular_expression" or "(parameter $1)" not in err["message"]:
                failures.append(f"{sql!r} with {bad!r} over HTTP: {err}")
    for sql, first in EXPLAINS:
        body = json.dumps({"sql": sql.replace("%s", "$1"), "params": [1]}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{http_port}/v1/sql", data=body,
                                     headers={"Content-Type": "application/json"})
        over_http = [row[0] for row in json.loads(urllib.request.urlopen(req).read())["rows"]]
        rows = conn.execute(sql, [1], prepare=True).fetchall()
        got = [row[0] for row in rows]
        if got != over_http or got[0] != first:
            failures.append(f"{sql!r} prepared: plan types {got}, over HTTP {over_http}")
        if "JSON" in sql and "Plan" not in json.loads(rows[0][1])[0]:
            failures.append(f"{sql!r} prepared: {rows[0][1][:200]}")
    assert not failures, "\n".join(failures)
    # The connection is fine afterwards.
    assert conn.execute("SELECT count(*) FROM er").fetchone()[0] == 0
    print("ok")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
