#!/bin/bash
# cubes.sh ROUNDS : the dashboard (bench/workload/dashboard) with and without
# the cubes of bench/cubes.sql, one server at a time, alternated each round
# (MODES, default "on off"; "on-nopart off-nopart" also turn the partial
# cache off). WORKLOAD: dashboard (default) or aggregates (without the two
# retention charts, which no cube answers).
#
# Needs KILN_BIN (a release build) and DATA, a data directory holding the
# abtest table (bench/peers/run.sh makes one; or set PARQUET to a file from
# `kiln gen abtest` and it is imported here). Each run gets a fresh copy of
# DATA; the "on" copy gets the cubes, and their build time is printed with
# their size against the table's segments. Each protocol warms up 10 s,
# then runs SECS s at C clients. With STREAM=W:B[:R[:D]] (writers, rows
# per request, at most R rows/s, times in the data's last D days, 14 by
# default: all of them), `kiln bench write` streams rows into the table
# through the warm-up and the run: dashboards over live data.
# PROTOCOLS (default "pg-simple pg http"; also pg-typed: the simple
# protocol with the range's bounds as TIMESTAMP '...').
# LOAD_BIN: the binary whose `kiln bench` loads the server (default
# KILN_BIN), to compare servers under one load generator. Prints one line
# per run:
#   round cubes protocol q/s p50_ms p99_ms p999_ms max_ms errors N worst_s P99 AT [stream_rows/s R]
# (worst_s: the highest p99 of any one second of the run, and that second).
set -eu
R=${1:-1}
BIN=${KILN_BIN:?set KILN_BIN to a release build of kiln}
LOAD=${LOAD_BIN:-$BIN}
C=${C:-50}; SECS=${SECS:-20}; DATA=${DATA:-/tmp/bench-data}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROTOCOLS=${PROTOCOLS:-"pg-simple pg http"}
HTTP=127.0.0.1:18193; PG=15543

if [ ! -d "$DATA" ]; then
  : "${PARQUET:?DATA does not exist: set PARQUET to an abtest Parquet file to import}"
  "$BIN" sql --data-dir "$DATA" "$(cat "$ROOT/bench/sql/abtest.kiln.sql")" >/dev/null
  "$BIN" import --data-dir "$DATA" --table abtest "$PARQUET"
fi

sql() { curl -sf -H 'Content-Type: application/sql' --data-binary "$1" "http://$HTTP/v1/sql"; }

start() { # start DIR [PARTIAL_CACHE_BYTES]
  KILN_PARTIAL_CACHE_BYTES=${2:-1GiB} "$BIN" serve --data-dir "$1" --http-addr $HTTP --pg-addr 127.0.0.1:$PG 2>/tmp/cubes-server.log &
  P=$!
  for _ in $(seq 200); do curl -sf "http://$HTTP/ready" >/dev/null && break; sleep 0.3; done
}

# The cubes: build time, then size against the table.
rm -rf /tmp/cubes-on && cp -r "$DATA" /tmp/cubes-on
start /tmp/cubes-on
t0=$(date +%s.%N)
grep -v '^--' "$ROOT/bench/cubes.sql" | tr '\n' ' ' | tr ';' '\n' | while read -r stmt; do
  [ -n "${stmt// }" ] && sql "$stmt" >/dev/null
done
until sql "SELECT count(*) FROM system.cubes WHERE state <> 'ready'" | grep -q '"rows":\[\[0\]\]'; do sleep 0.2; done
t1=$(date +%s.%N)
echo "cubes built in $(python3 -c "print(round($t1 - $t0, 1))") s"
sql "SELECT name, rows, bytes FROM system.cubes ORDER BY name"; echo
sql "SELECT sum(bytes) AS segment_bytes FROM system.segments"; echo
kill $P; wait $P 2>/dev/null || true

# MODES: on/off (cubes), with -nopart: the partial cache off too.
for r in $(seq "$R"); do for mode in ${MODES:-on off}; do
  rm -rf /tmp/cubes-run
  case $mode in on*) cp -r /tmp/cubes-on /tmp/cubes-run ;; *) cp -r "$DATA" /tmp/cubes-run ;; esac
  case $mode in *-nopart) start /tmp/cubes-run 0 ;; *) start /tmp/cubes-run ;; esac
  sleep 5 # the segment cache's prewarm
  for proto in $PROTOCOLS; do
    case $proto in http) URL=http://$HTTP ;; *) URL=postgres://127.0.0.1:$PG ;; esac
    W="--workload ${WORKLOAD:-dashboard}"
    if [ -n "${STREAM:-}" ]; then # a write stream through warm-up and run
      IFS=: read -r sw sb sr sd <<<"$STREAM"
      "$LOAD" bench write --url "http://$HTTP" --clients "$sw" --batch "$sb" --rate "${sr:-0}" --days "${sd:-14}" \
        --duration "$((SECS + 11))s" --seed "$r" --json >/tmp/cubes-stream.json 2>/dev/null &
      SP=$!
    fi
    "$LOAD" bench query --url "$URL" --protocol "$proto" --clients "$C" --duration 10s --seed 3 $W >/dev/null 2>&1
    line=$("$LOAD" bench query --url "$URL" --protocol "$proto" --clients "$C" --duration "${SECS}s" --seed 7 $W --json 2>/dev/null)
    stream=""
    if [ -n "${STREAM:-}" ]; then
      wait $SP
      stream="stream_rows/s $(python3 -c 'import json; print(round(json.load(open("/tmp/cubes-stream.json"))["rows_per_sec"]))')"
    fi
    echo "$r $mode $proto $(python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); l=d[-1] if isinstance(d,list) else d["levels"][-1]; w=max(enumerate(l.get("per_second") or [{"p99_ms": 0}]), key=lambda s: s[1]["p99_ms"]); print(round(l["qps"],1), l["p50_ms"], l["p99_ms"], l["p999_ms"], l["max_ms"], "errors", l["errors"], "worst_s", w[1]["p99_ms"], w[0] + 1)' <<<"$line") $stream"
  done
  kill $P; wait $P 2>/dev/null || true
done; done

# Writes (WRITES=0 skips them): an empty abtest table with no cube, then
# with the first two cubes of bench/cubes.sql; rows/s of `kiln bench write`
# and the mean flush time, and the flushes' time per million rows (flushes
# with and without cubes may differ in size).
[ "${WRITES:-1}" = 0 ] && exit 0
for r in $(seq "$R"); do for mode in off on; do
  rm -rf /tmp/cubes-write
  start /tmp/cubes-write
  sql "$(cat "$ROOT/bench/sql/abtest.kiln.sql")" >/dev/null
  if [ $mode = on ]; then
    grep -v '^--' "$ROOT/bench/cubes.sql" | tr '\n' ' ' | tr ';' '\n' | head -2 | while read -r stmt; do
      sql "$stmt" >/dev/null
    done
  fi
  line=$("$LOAD" bench write --url "http://$HTTP" --clients 16 --batch 1000 --duration "${SECS}s" --json 2>/dev/null)
  flush=$(curl -sf "http://$HTTP/metrics" | python3 -c '
import sys
m = {l.split()[0]: float(l.split()[1]) for l in sys.stdin if l.startswith(("kiln_flush_duration_seconds_", "kiln_rows_flushed_total"))}
n, s, rows = m.get("kiln_flush_duration_seconds_count", 0), m.get("kiln_flush_duration_seconds_sum", 0), m.get("kiln_rows_flushed_total", 0)
print(round(s / n * 1000, 1) if n else "-", "ms mean flush of", int(n), "|", round(s / rows * 1e9, 1) if rows else "-", "ms per 1M rows flushed")')
  echo "$r write cubes=$mode $(python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(round(d["rows_per_sec"]), "rows/s")' <<<"$line") $flush"
  kill $P; wait $P 2>/dev/null || true
done; done
