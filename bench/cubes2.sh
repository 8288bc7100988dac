#!/bin/bash
# cubes2.sh ROUNDS : the second cube benchmark (bench/cubes2/: table visits,
# six site charts) with and without the cubes of bench/cubes2.sql, one
# server at a time, alternated each round. Its data and queries are not
# those of bench/workload/dashboard, so a cube speed-up can be checked on a
# workload it was not tuned on.
#
#   KILN_BIN=<release kiln> [DATA=dir] [ROWS=3000000] [SEED=1] [SORT_KEY=]
#   [C=50] [SECS=20] [WARMUP=10] [PROTOCOLS="pg-simple pg http"]
#   [MODES="on off"] [STREAM=B:R] bench/cubes2.sh ROUNDS
#
# DATA (default /tmp/cubes2-data-$ROWS-$SEED) is made once if missing: a
# server on it, `cubes2 load` (ROWS rows through POST /v1/write), then a
# SIGTERM stop, which flushes the memstore into segments (--flush-on-close,
# on by default). Each run gets a fresh copy of DATA on free ports. Modes:
#   on        the cubes are created (their build time and sizes printed,
#             lines starting with #), then `cubes2 check` compares 60 chart
#             instances with cubes on and off and requires EXPLAIN to show a
#             CubeScan for every template; a failure stops the script.
#   off       no cube.
#   disabled  the cubes are created, and the clients turn them off
#             (SET kiln.cubes = off, ?cubes=off). Not the same as "off": a
#             session's own settings bypass the kept (cached) plans, so
#             every query is planned afresh.
# A mode with the suffix -nopart (on-nopart, off-nopart) also turns the
# partial-aggregate cache off (--partial-cache-bytes 0), which otherwise
# serves repeated charts of the "off" runs from per-segment partials.
# PROTOCOLS may also name pg-typed and pg-superset: the simple protocol with
# the range's bounds as TIMESTAMP '...' (Tableau, Looker) or as
# TO_TIMESTAMP('...', 'YYYY-MM-DD HH24:MI:SS.US') (Superset).
# Each protocol warms up WARMUP s, then runs SECS s at C clients. With
# STREAM=B:R, `cubes2 stream` writes new visits to the data's last two days
# through the warm-up and the run (B rows per request, at most R rows/s):
# dashboards over live data. Prints one line per run:
#   round mode protocol q/s p50_ms p99_ms errors N [stream_rows/s R]
set -eu
R=${1:-1}
: "${KILN_BIN:?set KILN_BIN to a release build of kiln}"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib/common.sh"
kiln_binary
trap bench_cleanup EXIT

ROWS=${ROWS:-3000000}; SEED=${SEED:-1}; SORT_KEY=${SORT_KEY:-}
C=${C:-50}; SECS=${SECS:-20}; WARMUP=${WARMUP:-10}
DATA=${DATA:-/tmp/cubes2-data-$ROWS-$SEED}
PROTOCOLS=${PROTOCOLS:-"pg-simple pg http"}
MODES=${MODES:-"on off"}
RUN=${RUN_DIR:-/tmp/cubes2-run}
TOOL=${TMPDIR:-/tmp}/cubes2-bin/cubes2

(cd "$ROOT/bench/cubes2" && go build -o "$TOOL" .)

sql() { curl -sf -H 'Content-Type: application/sql' --data-binary "$1" "http://$KILN_HTTP/v1/sql"; }

# stop: SIGTERM to the last server kiln_start started, and wait for it.
stop() {
  local pid=${BENCH_PIDS[${#BENCH_PIDS[@]}-1]}
  kill -TERM "$pid"
  wait "$pid" || true
  unset "BENCH_PIDS[${#BENCH_PIDS[@]}-1]"
}

if [ ! -d "$DATA" ]; then
  rm -rf "$DATA.partial"
  : >"$DATA.partial.log" # kiln_start reads it at once
  kiln_start "$DATA.partial"
  "$TOOL" load --http "$KILN_HTTP" --rows "$ROWS" --seed "$SEED" ${SORT_KEY:+--sort-key "$SORT_KEY"}
  stop # flushes on close
  mv "$DATA.partial" "$DATA"
fi

create_cubes() {
  grep -v '^--' "$ROOT/bench/cubes2.sql" | tr '\n' ' ' | tr ';' '\n' | while read -r stmt; do
    [ -n "${stmt// }" ] && sql "$stmt" >/dev/null
  done
  local i=0
  until sql "SELECT count(*) FROM system.cubes WHERE state <> 'ready'" | grep -q '"rows":\[\[0\]\]'; do
    i=$((i + 1)); [ $i -lt 18000 ] || { echo "cubes not ready after 1 h" >&2; return 1; }
    sleep 0.2
  done
}

first=1
for r in $(seq "$R"); do for mode in $MODES; do
  rm -rf "$RUN"
  cp -r "$DATA" "$RUN"
  : >"$RUN.log"
  case $mode in
    *-nopart) kiln_start "$RUN" --partial-cache-bytes 0 ;;
    *) kiln_start "$RUN" ;;
  esac
  PGURL="postgres://kiln@127.0.0.1:$KILN_PG_PORT/kiln?sslmode=disable"
  if [ $first = 1 ]; then
    t=$(sql "SELECT segments, segment_rows, segment_bytes, memstore_bytes FROM system.tables WHERE table_name = 'visits'")
    echo "# data: $t"
    grep -q "\"rows\":\[\[[0-9]*,$ROWS,[0-9]*,0\]\]" <<<"$t" || echo "warning: DATA is not $ROWS rows all in segments" >&2
    first=0
  fi
  OFF=""
  case ${mode%-nopart} in
    on|disabled)
      t0=$(date +%s.%N)
      create_cubes
      t1=$(date +%s.%N)
      echo "# cubes built in $(python3 -c "print(round($t1 - $t0, 1))") s: $(sql "SELECT name, rows, bytes FROM system.cubes ORDER BY name")"
      if [ ${mode%-nopart} = on ]; then
        "$TOOL" check --url "$PGURL" --seed 11 --n 60 --require-cube
      else
        OFF="--cubes off"
      fi
      ;;
    off) ;;
    *) echo "unknown mode $mode (on, off, disabled, each optionally -nopart)" >&2; exit 2 ;;
  esac
  sleep "${PREWARM:-5}" # the segment cache's prewarm
  for proto in $PROTOCOLS; do
    case $proto in http) URL=http://$KILN_HTTP ;; *) URL=$PGURL ;; esac
    if [ -n "${STREAM:-}" ]; then
      IFS=: read -r sb sr <<<"$STREAM"
      "$TOOL" stream --http "$KILN_HTTP" --batch "$sb" --rate "$sr" --duration "$((WARMUP + SECS + 1))s" >"$RUN.stream" &
      SP=$!
    fi
    "$TOOL" run --protocol "$proto" --url "$URL" --clients "$C" --duration "${WARMUP}s" --seed 3 $OFF >/dev/null
    line=$("$TOOL" run --protocol "$proto" --url "$URL" --clients "$C" --duration "${SECS}s" --seed 7 $OFF)
    stream=""
    if [ -n "${STREAM:-}" ]; then
      wait $SP
      stream="stream_rows/s $(python3 -c 'import json,sys; print(json.load(sys.stdin)["rows_per_sec"])' <"$RUN.stream")"
    fi
    echo "$r $mode $proto $(python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(d["qps"], d["p50_ms"], d["p99_ms"], "errors", d["errors"])' <<<"$line") $stream"
  done
  [ ${mode%-nopart} = off ] || echo "# answered by cubes: $(sql "SELECT name, queries_answered FROM system.cubes ORDER BY name")"
  stop
done; done
