#!/usr/bin/env python3
"""Many memory-hungry queries at once, for the memory limits.

Sends N copies of a GROUP BY of ROWS generated rows into ROWS groups at
once over HTTP, and prints the wall time and the answers by status and
code. Watch the server's peak RSS (VmHWM in /proc/PID/status) and
kiln_query_memory_bytes in /metrics while it runs.

    python3 bench/heavy.py --http 8080 [--n 200] [--rows 4000000]
"""
import argparse
import collections
import http.client
import json
import threading
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", type=int, default=8080)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--rows", type=int, default=4_000_000)
    a = ap.parse_args()
    sql = (f"SELECT count(*) FROM (SELECT v % {a.rows} AS k, count(*) AS c, "
           f"max(CAST(v AS VARCHAR)) AS m FROM generate_series(1, {a.rows}) g(v) GROUP BY k)")
    answers = collections.Counter()

    def one():
        c = http.client.HTTPConnection("127.0.0.1", a.http, timeout=3600)
        c.request("POST", "/v1/sql", sql, {"Content-Type": "application/sql"})
        r = c.getresponse()
        body = json.loads(r.read())
        if r.status == 200:
            ok = body["rows"] == [[a.rows]]
            answers[(200, "right" if ok else "WRONG")] += 1
        else:
            answers[(r.status, body["error"]["code"])] += 1

    started = time.time()
    threads = [threading.Thread(target=one) for _ in range(a.n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f"{time.time() - started:.1f} s", dict(answers))


if __name__ == "__main__":
    main()
