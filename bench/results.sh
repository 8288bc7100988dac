#!/usr/bin/env bash
# results.sh BUILD... : what sending large results costs, and what memory
# a result far larger as text than in memory takes (crates/kiln-server/src/
# chunks.rs). Each BUILD (a release kiln binary) in the order given, so
# `results.sh A B B A` alternates two builds, on a fresh copy of DATA (a
# data directory of `kiln gen abtest` rows).
# Cost: ROWS rows of every column (default 2,000,000), read to the end by
# curl over HTTP as json, csv and ndjson, and by psql's COPY TO STDOUT;
# one warm-up, then RUNS (default 5) wall times. Prints per build and
# format the median and the runs in ms.
# Memory: then one server per build answers SHARED_ROWS (default 20) rows
# of a 100 MB constant (string views share it) in each text format and
# COPY; prints the server's peak RSS (VmHWM) before and after.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib/common.sh"
trap bench_cleanup EXIT
DATA=${DATA:?a data directory of kiln gen abtest rows}
RUNS=${RUNS:-5}
ROWS=${ROWS:-2000000}
SHARED_ROWS=${SHARED_ROWS:-20}
WORK=$(mktemp -d /tmp/results.XXXXXX)
Q="SELECT * FROM abtest LIMIT $ROWS"
http() { curl -sf -o /dev/null -w '%{time_total}' -H 'Content-Type: application/sql' --data-binary "$1" "http://$KILN_HTTP/v1/sql?format=$2"; }
copy() {
  local s; s=$(date +%s.%N)
  psql -h 127.0.0.1 -p "$KILN_PG_PORT" -U postgres -Atq -c "COPY ($1) TO STDOUT" >/dev/null
  echo "$(date +%s.%N) - $s" | bc
}
median() {
  python3 -c '
import statistics, sys
ms = [round(float(x) * 1000, 1) for x in sys.argv[3:]]
print(sys.argv[1], "median", statistics.median(ms), "ms", ms, "::", sys.argv[2])' "$@"
}
peak() { awk '/VmHWM/ {print int($2/1024)}' "/proc/${BENCH_PIDS[0]}/status"; }
for KILN in "$@"; do
  rm -rf "$WORK/data"
  cp -r "$DATA" "$WORK/data"
  BENCH_PIDS=()
  kiln_start "$WORK/data"
  for f in json csv ndjson; do
    http "$Q" "$f" >/dev/null
    median "$(basename "$KILN")" "$f" $(for _ in $(seq "$RUNS"); do http "$Q" "$f"; echo; done)
  done
  copy "$Q" >/dev/null
  median "$(basename "$KILN")" copy $(for _ in $(seq "$RUNS"); do copy "$Q"; done)
  bench_cleanup
done
for KILN in "$@"; do
  rm -rf "$WORK/data"
  BENCH_PIDS=()
  kiln_start "$WORK/data"
  kiln_sql "CREATE TABLE t (ts TIMESTAMP NOT NULL, s VARCHAR)" >/dev/null
  kiln_sql "INSERT INTO t SELECT TIMESTAMP '2026-01-01 00:00:00' + x * INTERVAL '1 second', CAST(x AS VARCHAR) FROM generate_series(1, $SHARED_ROWS) t(x)" >/dev/null
  S="SELECT s, arrow_cast(repeat('a', 100000000), 'Utf8View') AS y FROM t"
  before=$(peak)
  for f in json csv ndjson; do http "$S" "$f" >/dev/null; done
  copy "$S" >/dev/null
  echo "$(basename "$KILN") shared: $SHARED_ROWS rows of 100 MB in json, csv, ndjson and COPY: peak RSS $before MiB before, $(peak) MiB after"
  bench_cleanup
done
rm -rf "$WORK"
