#!/usr/bin/env bash
# Benchmarks of `kiln serve`, in one run on this machine:
#  1. HTTP write rows/s: batches of 1, 100 and 10,000 rows, 1 and 64
#     clients, ack=durable and ack=memory (`kiln bench write`);
#  2. pgbench (-n -M prepared -j 2) with `SELECT 1` and a one-row lookup at
#     1, 16, 64 and 256 connections, against Kiln and against a PostgreSQL
#     server started here, same machine, same run;
#  3. the same at 16 connections with Kiln pinned to 1 core, then 2 (taskset):
#     q/s must rise with cores (no global lock on the query path).
# Usage: bench/server.sh [WRITE_SECONDS=20 (0: skip writes)] [PGBENCH_SECONDS=30]
# Prints Markdown tables for docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.sh
WRITE_S="${1:-20}"
PGBENCH_S="${2:-30}"
trap bench_cleanup EXIT

kiln_binary
pg_install
WORK=$(mktemp -d /tmp/kiln-server-bench.XXXX)
chmod 755 "$WORK"

if [ "$WRITE_S" != 0 ]; then # WRITE_SECONDS=0 runs pgbench only
echo "## HTTP writes (kiln bench write, ${WRITE_S}s each)"
echo
echo "| ack | clients | rows/request | requests/s | rows/s | p50 ms | p99 ms | p99.9 ms | errors |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for ack in durable memory; do
  for clients in 1 64; do
    for batch in 1 100 10000; do
      # A fresh server per cell, so earlier cells' flushes do not overlap.
      kiln_start "$WORK/w-$ack-$clients-$batch"
      "$KILN" bench write --url "http://$KILN_HTTP" --clients "$clients" --batch "$batch" \
        --duration "${WRITE_S}s" --ack "$ack" --json 2>/dev/null |
        python3 bench/lib/write_row.py
      kill "${BENCH_PIDS[-1]}"; wait "${BENCH_PIDS[-1]}" 2>/dev/null || true
    done
  done
done
fi

# pgbench against both servers: the same scripts, the same table.
LOOKUP_ROWS=100000
kiln_start "$WORK/pgbench-kiln"
PGBENCH_KILN_PID="${BENCH_PIDS[-1]}"
pg_start "$WORK/pg"
SETUP="CREATE TABLE kv (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL, v VARCHAR)"
FILL="INSERT INTO kv SELECT TIMESTAMP '2026-11-01 00:00:00', g, 'value-' || g FROM generate_series(1, $LOOKUP_ROWS) AS t(g)"
"$KILN" sql --url "http://$KILN_HTTP" "$SETUP; $FILL" >/dev/null
psql -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -c "$SETUP" -c "$FILL" \
  -c "CREATE UNIQUE INDEX ON kv (id)" -c "ANALYZE kv"
printf 'SELECT 1;\n' >"$WORK/select1.sql"
printf '\\set id random(1, %d)\nSELECT v FROM kv WHERE id = :id;\n' "$LOOKUP_ROWS" >"$WORK/lookup.sql"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
tps() { # tps HOST_PORT SCRIPT CLIENTS
  "$PG_BIN/pgbench" -n -M prepared -f "$2" -c "$3" -j 2 -T "$PGBENCH_S" \
    -h 127.0.0.1 -p "$1" -U postgres postgres 2>&1 |
    sed -nE 's/^tps = ([0-9.]+) \(without initial connection time\)/\1/p'
}
echo
echo "## pgbench -n -M prepared -j 2 -T $PGBENCH_S (q/s)"
echo
echo "| script | connections | Kiln q/s | PostgreSQL q/s | Kiln / PostgreSQL |"
echo "|---|---:|---:|---:|---:|"
for script in select1 lookup; do
  for c in 1 16 64 256; do
    k=$(tps "$KILN_PG_PORT" "$WORK/$script.sql" "$c")
    p=$(tps "$PG_PORT" "$WORK/$script.sql" "$c")
    ratio=$(ratio "${k:-0}" "${p:-0}")
    echo "| $script | $c | ${k:-failed} | ${p:-failed} | $ratio |"
  done
done

# Scaling with cores: the same data in a Kiln pinned to 1 and then 2 cores.
kill "$PGBENCH_KILN_PID" 2>/dev/null || true
echo
echo "## Kiln on 1 vs 2 cores (taskset), pgbench 16 connections"
echo
echo "| script | 1 core q/s | 2 cores q/s | ratio |"
echo "|---|---:|---:|---:|"
declare -A CORE_TPS
for cores in 0 0,1; do
  KILN_REAL="$KILN"; KILN="taskset -c $cores $KILN_REAL"
  kiln_start "$WORK/cores-$cores"
  KILN="$KILN_REAL"
  "$KILN" sql --url "http://$KILN_HTTP" "$SETUP; $FILL" >/dev/null
  for script in select1 lookup; do
    CORE_TPS[$script-$cores]=$(tps "$KILN_PG_PORT" "$WORK/$script.sql" 16)
  done
  kill "${BENCH_PIDS[-1]}"; wait "${BENCH_PIDS[-1]}" 2>/dev/null || true
done
for script in select1 lookup; do
  one=${CORE_TPS[$script-0]:-0}; two=${CORE_TPS[$script-0,1]:-0}
  echo "| $script | $one | $two | $(ratio "$two" "$one") |"
done
