#!/bin/bash
# livecost.sh ROUNDS : what a stream of writes costs a cube-answered
# dashboard, in four phases on one server (flushes off, so the memstore
# keeps what is written): the dashboard at rest; the same while
# `kiln bench write` streams STREAM=W:B:R (writers, rows per request,
# rows/s; default 2:100:25000) into the table; again once the stream has
# stopped, with its rows still in the memstore; again after a restart,
# which flushes them (the close does). Each phase warms up 10 s and runs
# SECS s at C clients over PROTOCOL (default pg-simple), with a
# psycopg client asking `SELECT 1` every 5 ms beside it: the latency of a
# light query meanwhile.
#
# Needs KILN_BIN (a release build) and DATA with the cubes of
# bench/cubes.sql built: bench/cubes.sh leaves one in /tmp/cubes-on
# (the default). Prints one line per phase:
#   round phase q/s p50_ms p99_ms max_ms | select1 p99_ms max_ms [memstore bytes]
set -eu
R=${1:-1}
BIN=${KILN_BIN:?set KILN_BIN to a release build of kiln}
LOAD=${LOAD_BIN:-$BIN}
C=${C:-50}; SECS=${SECS:-15}; DATA=${DATA:-/tmp/cubes-on}
PROTOCOL=${PROTOCOL:-pg-simple}; STREAM=${STREAM:-2:100:25000}
HTTP=127.0.0.1:18193; PG=15543
[ -f "$DATA/catalog.json" ] || { echo "DATA ($DATA) holds no database: run bench/cubes.sh first" >&2; exit 1; }
case $PROTOCOL in http) URL=http://$HTTP ;; *) URL=postgres://127.0.0.1:$PG ;; esac

start() {
  KILN_FLUSH_AGE=1h KILN_FLUSH_BYTES=64GiB "$BIN" serve --data-dir /tmp/livecost-run \
    --http-addr $HTTP --pg-addr 127.0.0.1:$PG 2>>/tmp/livecost-server.log &
  P=$!
  for _ in $(seq 200); do curl -sf "http://$HTTP/ready" >/dev/null && break; sleep 0.3; done
  sleep 5 # the segment cache's prewarm
}

probe() { # SELECT 1 every 5 ms for $1 s: its p99 and max
  python3 - "$1" <<'EOF'
import sys, time, psycopg
c = psycopg.connect("host=127.0.0.1 port=15543 user=kiln dbname=kiln", autocommit=True)
lat, end = [], time.time() + float(sys.argv[1])
while time.time() < end:
    t = time.perf_counter(); c.execute("SELECT 1").fetchall()
    lat.append((time.perf_counter() - t) * 1000); time.sleep(0.005)
lat.sort()
print("select1 %.1f %.1f" % (lat[int(len(lat) * .99)], lat[-1]))
EOF
}

phase() { # phase NAME ROUND
  "$LOAD" bench query --url "$URL" --protocol "$PROTOCOL" --clients "$C" --duration 10s \
    --seed 3 --workload aggregates >/dev/null 2>&1
  probe "$SECS" >/tmp/livecost-probe &
  local pr=$!
  local line
  line=$("$LOAD" bench query --url "$URL" --protocol "$PROTOCOL" --clients "$C" \
    --duration "${SECS}s" --seed 7 --workload aggregates --json 2>/dev/null)
  wait $pr
  local mem
  mem=$(curl -sf "http://$HTTP/metrics" | awk '/^kiln_memstore_bytes/ {s += $2} END {print s}')
  echo "$2 $1 $(python3 -c 'import json,sys; l=json.loads(sys.stdin.read())["levels"][-1]; print(round(l["qps"],1), l["p50_ms"], l["p99_ms"], l["max_ms"])' <<<"$line") | $(cat /tmp/livecost-probe) memstore $mem"
}

IFS=: read -r sw sb sr <<<"$STREAM"
for r in $(seq "$R"); do
  rm -rf /tmp/livecost-run && cp -r "$DATA" /tmp/livecost-run
  start
  phase rest "$r"
  "$LOAD" bench write --url "http://$HTTP" --clients "$sw" --batch "$sb" --rate "$sr" \
    --duration "$((SECS + 11))s" --seed "$r" --json >/dev/null 2>&1 &
  SP=$!
  phase live "$r"
  wait $SP
  phase held "$r"
  kill $P; wait $P 2>/dev/null || true
  start
  phase flushed "$r"
  kill $P; wait $P 2>/dev/null || true
done
