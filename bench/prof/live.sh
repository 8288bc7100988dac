#!/bin/bash
# live.sh BIN... : per binary, a fresh copy of ${DIR:-/tmp/ab-s}; 15 s query warm-up, then 20 s of 25 query clients next to 1 writer (batches of 1,000 rows)
for B in "$@"; do
  rm -rf /tmp/ab-w; cp -r ${DIR:-/tmp/ab-s} /tmp/ab-w
  $B serve --data-dir /tmp/ab-w --http-addr 127.0.0.1:18093 --pg-addr 127.0.0.1:15443 2>/tmp/w.log &
  P=$!
  for i in $(seq 100); do curl -sf 127.0.0.1:18093/ready >/dev/null && break; sleep 0.3; done
  $B bench query --url postgres://127.0.0.1:15443 --clients 25 --duration 15s --seed 3 >/dev/null 2>&1
  $B bench write --url http://127.0.0.1:18093 --clients 1 --batch 1000 --duration 20s --json > /tmp/w.json 2>/dev/null &
  W=$!
  echo -n "$B: "; $B bench query --url postgres://127.0.0.1:15443 --clients 25 --duration 20s --seed 7 2>/dev/null | tail -1
  wait $W
  echo "  writes: $(python3 -c "import json;v=json.load(open('/tmp/w.json'));print(round(v['rows_per_sec']), 'rows/s, p99', v['total']['p99_ms'], 'ms')")"
  curl -s 127.0.0.1:18093/metrics | grep -E "^kiln_partial_cache_(hits|misses)|^kiln_flushes" | tr '\n' ' '; echo
  kill $P; wait $P
done
