#!/bin/bash
# arith.sh DATA "SQL" BIN... : one query's server-side time on raw data,
# one server at a time, in the order given (repeat a binary to alternate).
# Each server gets a fresh copy of DATA (a data directory, e.g. 10M rows
# of `kiln gen abtest` imported as bench/cubes.sh does), the partial cache
# off; the query runs 25 times over HTTP and the last 20 runs' `elapsed_ms`
# are summarized. Prints: binary median p25 p75 (ms).
set -u
DATA=$1; Q=$2; shift 2
HTTP=127.0.0.1:18193
for bin in "$@"; do
  rm -rf /tmp/arith-run && cp -r "$DATA" /tmp/arith-run
  KILN_PARTIAL_CACHE_BYTES=0 "$bin" serve --data-dir /tmp/arith-run --http-addr $HTTP \
    --pg-addr 127.0.0.1:15543 2>/dev/null &
  P=$!
  for _ in $(seq 200); do curl -sf "http://$HTTP/ready" >/dev/null && break; sleep 0.3; done
  sleep 4
  for _ in $(seq 25); do
    curl -sf -H 'Content-Type: application/sql' --data-binary "$Q" "http://$HTTP/v1/sql" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["elapsed_ms"])'
  done | tail -20 | sort -n |
    awk -v b="$bin" '{a[NR]=$1} END {print b, "median", a[10], "p25", a[5], "p75", a[15]}'
  kill $P; wait $P 2>/dev/null
done
