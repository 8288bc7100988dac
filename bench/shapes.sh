#!/usr/bin/env bash
# shapes.sh [ROUNDS=2]: queries sent with their values written in, planned
# by their shape (--plan-cache-mode auto, the default) against planned as
# written (force-custom), alternated each round:
#  1. the abtest dashboard without its retention charts over the simple
#     protocol (literals inlined) and HTTP (bound `params`), cubes on and
#     off (bench/cubes.sh; needs KILN_BIN and DATA or PARQUET as it does);
#  2. pgbench -M simple, 16 connections, 15 s: a one-row lookup, and a
#     range count whose upper bound is an expression (so its text, and its
#     shape, differ at every query), over 100k rows.
# Prints cubes.sh's lines, then "round mode script q/s".
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.sh
R=${1:-2}
trap bench_cleanup EXIT
kiln_binary
pg_install
export KILN_BIN=$KILN

for r in $(seq "$R"); do for mode in auto force-custom; do
  echo "== round $r, --plan-cache-mode $mode"
  KILN_PLAN_CACHE_MODE=$mode WRITES=0 WORKLOAD=aggregates MODES="on off" \
    PROTOCOLS="pg-simple http" SECS=${SECS:-15} bench/cubes.sh 1 | grep -E '^1 (on|off) '
done; done

WORK=$(mktemp -d /tmp/kiln-shapes.XXXX)
chmod 755 "$WORK"
printf '\\set id random(1, 100000)\nSELECT v FROM kv WHERE id = :id;\n' >"$WORK/lookup.sql"
printf '\\set lo random(1, 90000)\nSELECT count(*), min(v) FROM kv WHERE id BETWEEN :lo AND :lo + 5000;\n' >"$WORK/range.sql"
for r in $(seq "$R"); do for mode in auto force-custom; do
  rm -rf "$WORK/d"
  KILN_PLAN_CACHE_MODE=$mode kiln_start "$WORK/d"
  "$KILN" sql --url "http://$KILN_HTTP" "CREATE TABLE kv (ts TIMESTAMP NOT NULL, id BIGINT NOT NULL, v VARCHAR); INSERT INTO kv SELECT TIMESTAMP '2026-11-01 00:00:00', g, 'value-' || g FROM generate_series(1, 100000) AS t(g)" >/dev/null
  for script in lookup range; do
    tps=$("$PG_BIN/pgbench" -n -M simple -f "$WORK/$script.sql" -c 16 -j 2 -T 15 \
      -h 127.0.0.1 -p "$KILN_PG_PORT" -U postgres postgres 2>&1 |
      sed -nE 's/^tps = ([0-9.]+) .*/\1/p')
    echo "$r $mode $script ${tps:-failed}"
  done
  kill "${BENCH_PIDS[-1]}"; wait "${BENCH_PIDS[-1]}" 2>/dev/null || true
done; done
