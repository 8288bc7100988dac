#!/usr/bin/env python3
"""Light-query latency while heavy queries saturate the server.

Sends HEAVY heavy queries at once over HTTP (each a long count over
generate_series, stopped by ?timeout=), waits until they run or queue, then
times SAMPLES sequential `SELECT 1` over HTTP (keep-alive), over psycopg
(simple protocol, one connection) and `SELECT count(*) FROM system.queries`,
and prints p50/p99 of each with the server's running/queued counts.

    python3 bench/light.py --http 8080 --pg 5433 [--heavy 300] [--samples 200]
"""
import argparse
import http.client
import statistics
import threading
import time
import urllib.request

HEAVY_SQL = "SELECT count(*) FROM generate_series(1, 1000000000000)"


def heavy(port, timeout_s, errors):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s + 30)
        c.request("POST", f"/v1/sql?timeout={timeout_s}s", HEAVY_SQL,
                  {"Content-Type": "application/sql"})
        c.getresponse().read()
    except Exception as e:  # counted, not fatal: the measurement is elsewhere
        errors.append(str(e))


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def timed(f, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        out.append((time.perf_counter() - t) * 1000)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", type=int, default=8080)
    ap.add_argument("--pg", type=int, default=5433)
    ap.add_argument("--heavy", type=int, default=300)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--heavy-timeout", type=int, default=120)
    a = ap.parse_args()

    errors = []
    threads = [threading.Thread(target=heavy, args=(a.http, a.heavy_timeout, errors), daemon=True)
               for _ in range(a.heavy)]
    for t in threads:
        t.start()
    time.sleep(3)
    running = metric(a.http, "kiln_queries_running")
    queued = metric(a.http, "kiln_queries_queued")

    h = http.client.HTTPConnection("127.0.0.1", a.http, timeout=30)

    def http_one():
        h.request("POST", "/v1/sql", "SELECT 1", {"Content-Type": "application/sql"})
        body = h.getresponse().read()
        assert b"1" in body, body

    import psycopg
    pg = psycopg.connect(f"host=127.0.0.1 port={a.pg} user=kiln dbname=kiln", autocommit=True)

    def pg_one():
        assert pg.execute("SELECT 1").fetchone()[0] == 1

    def system_one():
        pg.execute("SELECT count(*) FROM system.queries").fetchone()

    rows = {
        "http SELECT 1": timed(http_one, a.samples),
        "psycopg SELECT 1": timed(pg_one, a.samples),
        "psycopg system.queries": timed(system_one, a.samples),
    }
    after_running = metric(a.http, "kiln_queries_running")
    after_queued = metric(a.http, "kiln_queries_queued")
    print(f"heavy sent {a.heavy}: running {running:.0f} queued {queued:.0f} before, "
          f"running {after_running:.0f} queued {after_queued:.0f} after; heavy errors {len(errors)}")
    for name, xs in rows.items():
        print(f"{name:24s} p50 {statistics.median(xs):7.1f} ms  p99 {pct(xs, 0.99):7.1f} ms  max {max(xs):7.1f} ms")


if __name__ == "__main__":
    main()
