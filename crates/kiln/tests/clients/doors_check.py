"""Runs probe statements through the PostgreSQL extended protocol (psycopg 3
binds every query with Parse/Bind/Execute) and prints, for each, "ok" with
its first value or the SQLSTATE of its error, one JSON object per line.

Usage: python3 doors_check.py PORT SQL...
"""
import json
import sys

import psycopg


def main(port: int, statements: list[str]) -> None:
    conn = psycopg.connect(
        host="127.0.0.1", port=port, user="postgres", dbname="postgres",
        autocommit=True, connect_timeout=10,
    )
    for sql in statements:
        try:
            cur = conn.execute(sql, prepare=True)
            value = cur.fetchone()[0] if cur.description else cur.rowcount
            print(json.dumps({"sql": sql, "ok": str(value)}))
        except psycopg.Error as e:
            print(json.dumps({"sql": sql, "sqlstate": e.sqlstate}))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
