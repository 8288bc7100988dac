#!/usr/bin/env bash
# relative.sh BUILD... : a chart whose range is written relative to its
# end, which its text names twice (`ts >= CAST('<end>' AS TIMESTAMP) -
# INTERVAL '6 hours' AND ts < '<end>'`), each query with a new site and
# end, over the visits table of bench/cubes2 with the cubes of
# bench/cubes2.sql. Runs each BUILD (a release kiln binary) in the order
# given, so `relative.sh A B B A` alternates two builds. Per build: a fresh
# copy of DATA with the cubes built, then C clients (default 16) for SECS s
# (default 20) after a 5 s warm-up, over the simple protocol (pgbench -M
# simple) and over HTTP with the values written in (bench/textload).
# DATA (default /tmp/cubes2-data-3000000-1) is made by bench/cubes2.sh if
# missing. Prints one line per build and door:
#   build door q/s ... unparsed=N (kiln_plan_cache_unparsed_runs_total)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib/common.sh"
[ $# -gt 0 ] || { echo "usage: relative.sh BUILD..." >&2; exit 2; }
trap bench_cleanup EXIT
pg_install
DATA=${DATA:-/tmp/cubes2-data-3000000-1}; C=${C:-16}; SECS=${SECS:-20}
RUN=${RUN_DIR:-/tmp/relative-run}
WORK=$(mktemp -d)
[ -d "$DATA" ] || KILN_BIN=$1 DATA=$DATA MODES=" " "$ROOT/bench/cubes2.sh" 1
(cd "$ROOT/bench/textload" && go build -o "$WORK/textload" .)

cat >"$WORK/pg.sql" <<'SQL'
\set s random(1, 60)
\set d random(10, 30)
\set h random(10, 23)
SELECT date_trunc('hour', ts) AS hour, count(*) AS events FROM visits WHERE site_id = :s AND ts >= CAST('2026-10-:d :h:00:00' AS TIMESTAMP) - INTERVAL '6 hours' AND ts < '2026-10-:d :h:00:00' GROUP BY date_trunc('hour', ts) ORDER BY hour;
SQL
HTTP_TEXT="SELECT date_trunc('hour', ts) AS hour, count(*) AS events FROM visits WHERE site_id = {s:1-60} AND ts >= CAST('2026-10-{d:10-30} {h:10-23}:00:00' AS TIMESTAMP) - INTERVAL '6 hours' AND ts < '2026-10-{d} {h}:00:00' GROUP BY date_trunc('hour', ts) ORDER BY hour"

unparsed() { curl -sf "http://$KILN_HTTP/metrics" | awk '/^kiln_plan_cache_unparsed_runs_total/ {print $2}'; }
pgbench() {
  "$PG_BIN/pgbench" -n -M simple -h 127.0.0.1 -p "$KILN_PG_PORT" -U postgres -c "$C" -j 2 \
    -T "$1" -f "$WORK/pg.sql" postgres 2>&1
}

for build in "$@"; do
  KILN=$build
  rm -rf "$RUN"; cp -r "$DATA" "$RUN"
  kiln_start "$RUN"
  kiln_cubes "$ROOT/bench/cubes2.sql"
  pgbench 5 >/dev/null
  tps=$(pgbench "$SECS" | awk '/^tps/ {print $3}')
  echo "$build pg-simple $tps q/s unparsed=$(unparsed)"
  "$WORK/textload" "http://$KILN_HTTP" "$C" 5 "$HTTP_TEXT" >/dev/null
  echo "$build http $("$WORK/textload" "http://$KILN_HTTP" "$C" "$SECS" "$HTTP_TEXT") unparsed=$(unparsed)"
  bench_cleanup; BENCH_PIDS=()
done
rm -rf "$WORK" "$RUN"
