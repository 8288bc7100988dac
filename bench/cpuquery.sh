#!/bin/bash
# cpuquery.sh BUILD... : the server's CPU time per query of the
# cube-answered dashboard under a live stream, one run per build given
# (alternate them: `cpuquery.sh A B A B`). CPU time per query is steadier
# than q/s on a shared, noisy host: it counts the server's own work, not
# what the host lets it run.
#
# Each run copies DATA (the cubes of bench/cubes.sql built: bench/cubes.sh
# leaves one in /tmp/cubes-on), starts the build, streams
# STREAM=W:B:R:D (writers, rows per request, rows/s, days; default
# 2:100:25000:14) with `kiln bench write`, and runs `kiln bench query
# --workload aggregates` at C clients (default 50) over PROTOCOL (pg,
# pg-simple or http; default pg) for SECS s (default 38), both from
# LOAD_BIN (default the build itself). Prints one line per run:
#   build protocol q/s p99_ms cpu_us_per_query
set -eu
DATA=${DATA:-/tmp/cubes-on}; C=${C:-50}; SECS=${SECS:-38}
PROTOCOL=${PROTOCOL:-pg}; STREAM=${STREAM:-2:100:25000:14}
IFS=: read -r W B R D <<<"$STREAM"; D=${D:-14}
HTTP=127.0.0.1:18193; PG=15543
[ -f "$DATA/catalog.json" ] || { echo "DATA ($DATA) holds no database: run bench/cubes.sh first" >&2; exit 1; }
case $PROTOCOL in http) URL=http://$HTTP ;; *) URL=postgres://127.0.0.1:$PG ;; esac
TICK=$(getconf CLK_TCK)
for BIN in "$@"; do
  LOAD=${LOAD_BIN:-$BIN}
  rm -rf /tmp/cpuquery-run; cp -r "$DATA" /tmp/cpuquery-run
  KILN_LOG=warn "$BIN" serve --data-dir /tmp/cpuquery-run --http-addr $HTTP \
    --pg-addr 127.0.0.1:$PG 2>>/tmp/cpuquery-server.log &
  P=$!
  for _ in $(seq 200); do curl -sf "http://$HTTP/ready" >/dev/null && break; sleep 0.3; done
  sleep 3
  "$LOAD" bench write --url http://$HTTP --clients "$W" --batch "$B" --rate "$R" --days "$D" \
    --duration $((SECS + 4))s --json >/dev/null 2>&1 &
  sleep 2
  c0=$(awk '{print $14 + $15}' /proc/$P/stat)
  "$LOAD" bench query --url $URL --protocol "$PROTOCOL" --clients "$C" --duration ${SECS}s \
    --seed 7 --workload aggregates --json >/tmp/cpuquery-q.json 2>/dev/null
  c1=$(awk '{print $14 + $15}' /proc/$P/stat)
  sleep 2; kill $P; wait $P 2>/dev/null || true
  python3 - "$BIN" "$PROTOCOL" $((c1 - c0)) "$TICK" <<'PY'
import json, sys
d = json.load(open("/tmp/cpuquery-q.json"))
l = d[-1] if isinstance(d, list) else d["levels"][-1]
us = int(sys.argv[3]) * 1e6 / int(sys.argv[4]) / l["queries"]
print(sys.argv[1], sys.argv[2], round(l["qps"]), l["p99_ms"], round(us))
PY
done
