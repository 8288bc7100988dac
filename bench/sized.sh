#!/usr/bin/env bash
# sized.sh BUILD... : what the size guards on functions cost
# (crates/kiln-query/src/functions/sized.rs). Each BUILD (a release kiln
# binary) in the order given, so `sized.sh A B B A` alternates two builds,
# gets a fresh copy of DATA (a data directory of `kiln gen abtest` rows)
# with the partial-aggregate cache off, so every run evaluates every row.
# Per query: one run to warm the segment cache, then RUNS (default 5),
# timed by the server (`elapsed_ms`). Prints, per build and query, the
# median and the runs in ms. The last query guards nothing: the control.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib/common.sh"
trap bench_cleanup EXIT
DATA=${DATA:?a data directory of kiln gen abtest rows}
RUNS=${RUNS:-5}
QUERIES=(
  "SELECT sum(length(replace(page_url, '/', '//'))) FROM abtest"
  "SELECT sum(length(replace(page_url, '/item/', '/i/'))) FROM abtest"
  "SELECT sum(length(regexp_replace(page_url, '[0-9]+', 'N', 'g'))) FROM abtest"
  "SELECT sum(length(lpad(page_url, 40, '*'))) FROM abtest"
  "SELECT sum(length(repeat(arm, 3))) FROM abtest"
  "SELECT sum(length(concat(page_url, '?arm=', arm))) FROM abtest"
  "SELECT sum(length(concat_ws('/', arm, page_url))) FROM abtest"
  "SELECT sum(length(page_url)) FROM abtest"
)
WORK=$(mktemp -d /tmp/sized.XXXXXX)
for KILN in "$@"; do
  rm -rf "$WORK/data"
  cp -r "$DATA" "$WORK/data"
  BENCH_PIDS=()
  kiln_start "$WORK/data" --partial-cache-bytes 0
  for q in "${QUERIES[@]}"; do
    kiln_sql "$q" >/dev/null
    for _ in $(seq "$RUNS"); do kiln_sql "$q"; echo; done |
      python3 -c '
import json, statistics, sys
ms = [round(json.loads(l)["elapsed_ms"], 1) for l in sys.stdin if l.strip()]
print(sys.argv[1], "median", statistics.median(ms), "ms", ms, "::", sys.argv[2])' "$(basename "$KILN")" "$q"
  done
  bench_cleanup
done
rm -rf "$WORK"
