#!/usr/bin/env bash
# Benchmarks of the storage core (generation, import, durable commits, GROUP BY), as recorded in
# docs/benchmarks.md. Usage: bench/core.sh [ROWS]   (default 10000000)
# Needs a release build: cargo build --release -p kiln
set -euo pipefail
cd "$(dirname "$0")/.."
ROWS="${1:-10000000}"
KILN="${KILN_BIN:-${CARGO_TARGET_DIR:-$HOME/.cache/kiln/target}/release/kiln}"
W="${BENCH_DIR:-/tmp/kiln-bench}"
rm -rf "$W"; mkdir -p "$W"
export KILN_LOG=warn

echo "== generate $ROWS rows"
"$KILN" gen abtest --rows "$ROWS" --out "$W/abtest.parquet"
"$KILN" gen abtest --rows "$ROWS" --out "$W/abtest.csv"

echo "== import Parquet"
"$KILN" sql --data-dir "$W/pq" "$(cat bench/sql/abtest.sql)" >/dev/null
"$KILN" import --data-dir "$W/pq" --table abtest "$W/abtest.parquet"
echo "== import CSV"
"$KILN" sql --data-dir "$W/csv" "$(cat bench/sql/abtest.sql)" >/dev/null
"$KILN" import --data-dir "$W/csv" --table abtest "$W/abtest.csv"

echo "== durable single-row commits (a flush every 2s during the run)"
for writers in 1 64; do
  KILN_FLUSH_AGE=2s "$KILN" bench write-embedded --data-dir "$W/w$writers" --writers "$writers" --duration 20s 2>&1 | tail -1
done

echo "== GROUP BY: Kiln table vs DataFusion on the same data in one Parquet file"
"$KILN" bench scan-vs-parquet --data-dir "$W/pq" --file "$W/abtest.parquet" --repeat 7 \
  --query "SELECT arm, count(*), sum(amount), avg(dwell_ms) FROM {table} GROUP BY arm" \
  --query "SELECT experiment_id, arm, count(DISTINCT user_id) FROM {table} GROUP BY experiment_id, arm" \
  --query "SELECT region, platform, count(*) FROM {table} WHERE action = 'purchase' GROUP BY region, platform" \
  --query "SELECT date_trunc('day', event_time) AS d, count(*) FROM {table} WHERE event_time >= TIMESTAMP '2026-11-08' GROUP BY d ORDER BY d"
