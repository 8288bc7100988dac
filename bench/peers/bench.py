"""Closed-loop load test of one peer engine with the dashboard workload.

Why: Kiln's `kiln bench query` measures Kiln over its PostgreSQL port; this
is the same measurement for DuckDB, chDB and PostgreSQL, with the same
queries, the same parameter streams (workload.CallGen) and the same JSON
output, so `report.py` can put all systems in one table.

For each concurrency level: one thread per client, each with its own
connection (opened before the clock starts), each running its own call
stream back to back (closed loop) until --duration has passed; queries in
flight at the deadline are allowed to finish and are counted. q/s = successful
queries / (time from start until the last client stopped). Latency is the
wall time of execute + fetch of all rows, in ms; percentiles are nearest-rank
over the successful queries. Every query is run once (warm-up) before the
first level.

Usage: python bench.py --engine duckdb|chdb|postgres --parquet FILE --workdir DIR
                       [--clients 1,15,25] [--duration 60s] [--seed 1] [--out FILE.json]
"""
import argparse
import json
import math
import sys
import threading
import time

import workload
from engines import ENGINES


def seconds(text):
    """'60s', '2m', '500ms' or a plain number of seconds."""
    for suffix, scale in (("ms", 1e-3), ("s", 1), ("m", 60), ("h", 3600)):
        if text.endswith(suffix) and text[: -len(suffix)].replace(".", "", 1).isdigit():
            return float(text[: -len(suffix)]) * scale
    return float(text)


def percentile(sorted_ms, q):
    if not sorted_ms:
        return 0.0
    return sorted_ms[max(0, math.ceil(q * len(sorted_ms)) - 1)]


def run_level(engine, clients, duration, seed, names):
    conns = [engine.connect() for _ in range(clients)]
    lat = [[] for _ in range(clients)]
    errors = [0] * clients
    first_error = {}
    start_gate = threading.Barrier(clients + 1)
    deadline = [0.0]

    def client(k):
        gen, conn, mine = workload.CallGen(seed, k), conns[k], lat[k]
        start_gate.wait()
        while time.perf_counter() < deadline[0]:
            qi, e, a, b = gen.next_call()
            t0 = time.perf_counter()
            try:
                conn.run(qi, (e, a, b))
                mine.append((time.perf_counter() - t0) * 1000.0)
            except Exception as ex:
                errors[k] += 1
                first_error.setdefault(names[qi], str(ex).splitlines()[0][:300])
                if hasattr(conn, "con"):  # psycopg: leave the failed transaction
                    conn.con.rollback()

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    t0 = time.perf_counter()
    deadline[0] = t0 + duration
    start_gate.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.close()
    for q, msg in sorted(first_error.items()):
        print(f"  error in {q}: {msg}", file=sys.stderr)
    ms = sorted(x for per in lat for x in per)
    return {
        "clients": clients,
        "queries": len(ms),
        "qps": round(len(ms) / elapsed, 2),
        "mean_ms": round(sum(ms) / len(ms), 3) if ms else 0.0,
        "p50_ms": round(percentile(ms, 0.50), 3),
        "p95_ms": round(percentile(ms, 0.95), 3),
        "p99_ms": round(percentile(ms, 0.99), 3),
        "p999_ms": round(percentile(ms, 0.999), 3),
        "errors": sum(errors),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", required=True, choices=["duckdb", "chdb", "postgres"])
    ap.add_argument("--parquet", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--clients", default="1,15,25,50,75,100,150")
    ap.add_argument("--duration", default="60s")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    levels = [int(x) for x in a.clients.split(",") if x]
    duration = seconds(a.duration)
    names = workload.query_names()

    engine = ENGINES[a.engine](a.workdir, a.parquet)
    t = time.perf_counter()
    engine.load(max_clients=max(levels))
    print(f"{a.engine}: data ready in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    result = {"system": a.engine, "levels": []}
    if engine.note:
        result["note"] = engine.note
        print(f"{a.engine}: NOTE: {engine.note}", file=sys.stderr)
    try:
        warm = engine.connect()
        t = time.perf_counter()
        for qi in range(len(names)):
            _, e, s, end = workload.CallGen(a.seed, 0).next_call()
            warm.run(qi, (e, s, end))
        warm.close()
        print(f"{a.engine}: warm-up (each query once) {time.perf_counter() - t:.2f}s", file=sys.stderr)
        for n in levels:
            lvl = run_level(engine, n, duration, a.seed, names)
            result["levels"].append(lvl)
            print(f"{a.engine}: clients={n} queries={lvl['queries']} qps={lvl['qps']} "
                  f"p50={lvl['p50_ms']}ms p99={lvl['p99_ms']}ms errors={lvl['errors']}", file=sys.stderr)
    finally:
        engine.close()
    text = json.dumps(result)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
