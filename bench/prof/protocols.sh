#!/bin/bash
# protocols.sh ROUNDS CLIENT_BIN SERVER_BIN... : the dashboard over the
# PostgreSQL extended protocol (prepared statements), the simple protocol
# (values written into the SQL) and HTTP, one server at a time, binaries
# alternated each round. Each server gets a fresh copy of $DATA (a data
# directory with the abtest table), warms up 10 s per protocol, then is
# measured for $SECS s at $C clients. CLIENT_BIN drives every server, so the
# client is the same for all. Prints one line per run:
#   round server protocol q/s p50_ms p99_ms errors N
set -u
R=$1; CLIENT=$2; shift 2
C=${C:-25}; SECS=${SECS:-20}; DATA=${DATA:-/tmp/bench-data}
for r in $(seq "$R"); do for B in "$@"; do
  rm -rf /tmp/protocols-run && cp -r "$DATA" /tmp/protocols-run
  "$B" serve --data-dir /tmp/protocols-run --http-addr 127.0.0.1:18191 --pg-addr 127.0.0.1:15541 2>/tmp/protocols-server.log &
  P=$!
  for i in $(seq 200); do curl -sf 127.0.0.1:18191/ready >/dev/null && break; sleep 0.3; done
  sleep 5 # the segment cache's prewarm
  for proto in pg pg-simple http; do
    case $proto in http) URL=http://127.0.0.1:18191 ;; *) URL=postgres://127.0.0.1:15541 ;; esac
    "$CLIENT" bench query --url $URL --protocol $proto --clients "$C" --duration 10s --seed 3 >/dev/null 2>&1
    line=$("$CLIENT" bench query --url $URL --protocol $proto --clients "$C" --duration ${SECS}s --seed 7 --json 2>/dev/null)
    echo "$r $(basename "$B") $proto $(python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); l=d[-1] if isinstance(d,list) else d["levels"][-1]; print(round(l["qps"],1), l["p50_ms"], l["p99_ms"], "errors", l["errors"])' <<<"$line")"
  done
  kill $P; wait $P 2>/dev/null
done; done
