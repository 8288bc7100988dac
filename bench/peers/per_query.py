"""Per-query latency of the dashboard workload, Kiln beside DuckDB, one client.

Why: the concurrency table of run.sh says how much slower Kiln is overall;
this says which queries are slower, the first step of profiling. Every query
runs with the same parameters (experiment 3, 2026-11-03 to 2026-11-10, a
large experiment) `--reps` times on each engine, one after the other; it
prints the medians.

Usage (the venv and the DuckDB file that run.sh made, a running kiln serve):
  ~/.cache/kiln/peers-venv/bin/python bench/peers/per_query.py \
      --kiln-port 5433 --duckdb /tmp/kiln-peers/engines/duckdb/abtest.duckdb
"""
import argparse
import datetime as dt
import statistics
import time

import duckdb
import psycopg

import workload

PARAMS = [3, dt.datetime(2026, 11, 3), dt.datetime(2026, 11, 10)]


def medians(run, queries, reps):
    out = []
    for _, sql in queries:
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            run(sql)
            times.append((time.perf_counter() - t) * 1000)
        out.append(statistics.median(times))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln-port", type=int, required=True)
    ap.add_argument("--duckdb", required=True)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()

    kiln = psycopg.connect(f"host=127.0.0.1 port={args.kiln_port} user=kiln dbname=kiln", autocommit=True)
    named = {f"p{i + 1}": v for i, v in enumerate(PARAMS)}
    k = medians(lambda sql: kiln.execute(workload.to_psycopg(sql), named, prepare=True).fetchall(),
                workload.load_queries("kiln"), args.reps)
    duck = duckdb.connect(args.duckdb, read_only=True)
    duck.execute("SET threads = 2")
    d = medians(lambda sql: duck.execute(sql, PARAMS).fetchall(), workload.load_queries("duckdb"), args.reps)

    print("| query | Kiln ms | DuckDB ms | Kiln / DuckDB |")
    print("|---|---:|---:|---:|")
    for (name, _), km, dm in zip(workload.load_queries("kiln"), k, d):
        print(f"| {name} | {km:.1f} | {dm:.1f} | {km / dm:.2f}x |")
    print(f"| **sum** | {sum(k):.1f} | {sum(d):.1f} | {sum(k) / sum(d):.2f}x |")


if __name__ == "__main__":
    main()
