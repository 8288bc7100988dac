#!/usr/bin/env bash
# LIKE and exact-distinct benchmarks, Kiln vs
# DataFusion-on-Parquet vs DuckDB, on the data bench/core.sh generated and
# imported. Usage: bench/like.sh   (after bench/core.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
KILN="${KILN_BIN:-${CARGO_TARGET_DIR:-$HOME/.cache/kiln/target}/release/kiln}"
W="${BENCH_DIR:-/tmp/kiln-bench}"
python3 -c 'import duckdb' 2>/dev/null || python3 -m pip install -q duckdb
Q1="SELECT count(*) FROM {table} WHERE page_url LIKE '%src=feed%'"
Q2="SELECT count(*) FROM {table} WHERE page_url LIKE '/item/%'"
Q3="SELECT experiment_id, arm, count(DISTINCT user_id) FROM {table} GROUP BY experiment_id, arm"
Q4="SELECT experiment_id, arm, bitmap_count(bitmap_agg(user_id)) FROM {table} GROUP BY experiment_id, arm"
"$KILN" bench scan-vs-parquet --data-dir "$W/pq" --file "$W/abtest.parquet" --repeat 7 \
  --query "$Q1" --query "$Q2" --query "$Q3" --query "$Q4"
python3 - "$W/abtest.parquet" "$Q1" "$Q2" "$Q3" <<'PY'
import statistics, sys, time, duckdb
path, queries = sys.argv[1], sys.argv[2:]
con = duckdb.connect()
con.execute("SET threads = 2")
con.execute(f"CREATE VIEW abtest AS SELECT * FROM read_parquet('{path}')")
print("| query | duckdb (parquet file) median ms |")
print("|---|---|")
for q in queries:
    sql = q.replace("{table}", "abtest")
    times = []
    for _ in range(7):
        t = time.perf_counter(); con.execute(sql).fetchall(); times.append((time.perf_counter() - t) * 1000)
    print(f"| `{sql}` | {statistics.median(times):.1f} |")
PY
