#!/usr/bin/env python3
"""Many memory-hungry queries at once, for the memory limits.

Sends N memory-hungry queries over ROWS generated rows at once over HTTP,
checks each answer against the one expected from ROWS, and prints the wall
time and the answers by status and code (`right` or `WRONG` for a 200).
Watch the server's peak RSS (VmHWM in /proc/PID/status) and
kiln_query_memory_bytes in /metrics while it runs.

--mix picks the query:

    group     GROUP BY into ROWS groups, each with a string max (the default)
    sort      row_number() over all ROWS rows ordered by a string: a full sort
    join      hash join of two series of ROWS on equality, counted
    distinct  count(DISTINCT) of ROWS strings
    window    row_number() partitioned by v % 1000, ordered by v
    mixed     the five above, round-robin over the N queries; answers are
              then counted per query as well

An error other than out_of_memory (53200) or overloaded (53300), a WRONG
answer, or a failed connection is also printed with its first body.

    python3 bench/heavy.py --http 8080 [--n 200] [--rows 4000000] [--mix group]
"""
import argparse
import collections
import http.client
import json
import threading
import time


def group(rows):
    return (f"SELECT count(*) FROM (SELECT v % {rows} AS k, count(*) AS c, "
            f"max(CAST(v AS VARCHAR)) AS m FROM generate_series(1, {rows}) g(v) GROUP BY k)",
            rows)


def sort(rows):
    return (f"SELECT max(rn) FROM (SELECT row_number() OVER (ORDER BY CAST(v AS VARCHAR) DESC) "
            f"AS rn FROM generate_series(1, {rows}) g(v))",
            rows)


def join(rows):
    return (f"SELECT count(*) FROM generate_series(1, {rows}) a(x) "
            f"JOIN generate_series(1, {rows}) b(y) ON a.x = b.y",
            rows)


def distinct(rows):
    return (f"SELECT count(DISTINCT CAST(v AS VARCHAR)) FROM generate_series(1, {rows}) g(v)",
            rows)


def window(rows):
    # 1..rows falls into 1000 partitions by v % 1000: `extra` of them hold
    # q + 1 rows, the rest q; row numbers in one of n rows sum to n(n+1)/2.
    q, extra = divmod(rows, 1000)
    expected = extra * (q + 1) * (q + 2) // 2 + (1000 - extra) * q * (q + 1) // 2
    return (f"SELECT sum(rn) FROM (SELECT row_number() OVER (PARTITION BY v % 1000 ORDER BY v) "
            f"AS rn FROM generate_series(1, {rows}) g(v))",
            expected)


MIXES = {"group": group, "sort": sort, "join": join, "distinct": distinct, "window": window}
EXPECTED_ERRORS = {"out_of_memory", "overloaded"}  # SQLSTATE 53200, 53300


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", type=int, default=8080)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--mix", choices=[*MIXES, "mixed"], default="group")
    a = ap.parse_args()
    names = list(MIXES) if a.mix == "mixed" else [a.mix]
    queries = {name: MIXES[name](a.rows) for name in names}
    answers = collections.Counter()
    firsts = {}  # the first body of each unexpected outcome
    lock = threading.Lock()

    def one(name):
        sql, expected = queries[name]
        try:
            c = http.client.HTTPConnection("127.0.0.1", a.http, timeout=3600)
            c.request("POST", "/v1/sql", sql, {"Content-Type": "application/sql"})
            r = c.getresponse()
            text = r.read()
            body = json.loads(text)
            if r.status == 200:
                ok = body["rows"] == [[expected]]
                key = (200, "right" if ok else "WRONG")
            else:
                ok = body["error"]["code"] in EXPECTED_ERRORS
                key = (r.status, body["error"]["code"])
        except Exception as e:  # the server went away, or a body was no JSON
            ok, key, text = False, ("error", type(e).__name__), str(e).encode()
        if len(names) > 1:
            key = (name, *key)
        with lock:
            answers[key] += 1
            if not ok:
                firsts.setdefault(key, text.decode(errors="replace"))

    started = time.time()
    threads = [threading.Thread(target=one, args=(names[i % len(names)],)) for i in range(a.n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"{time.time() - started:.1f} s", dict(answers))
    for key, text in firsts.items():
        print("first", key, text[:2000])


if __name__ == "__main__":
    main()
