#!/bin/bash
# compaction.sh BUILD... : what flushes and compactions cost under a live
# stream with cubes, no queries. For each build (a path to a `kiln`
# release binary, run in the order given: alternate them), a fresh copy of
# CUBES (a data directory holding the abtest table and the cubes of
# bench/cubes.sql: the "on" copy bench/cubes.sh makes) is served with
# FLUSH_BYTES (default 16MiB, so a minute holds several flushes and
# compactions), and `kiln bench write` streams 25,000 rows/s over 14 days
# (2 writers, 100 rows a request) for SECS (default 60) s. Prints the
# server's CPU seconds over the stream and its flush and compaction
# counters and durations (`/metrics`).
set -eu
: "${CUBES:?a data directory with the abtest table and its cubes}"
SECS=${SECS:-60}; FLUSH_BYTES=${FLUSH_BYTES:-16MiB}
HTTP=127.0.0.1:${HTTP_PORT:-18293}; PG=127.0.0.1:${PG_PORT:-15643}
RUN=$(mktemp -d)
trap 'rm -rf "$RUN"' EXIT
for bin in "$@"; do
  rm -rf "$RUN/data"; cp -r "$CUBES" "$RUN/data"
  KILN_FLUSH_BYTES=$FLUSH_BYTES "$bin" serve --data-dir "$RUN/data" --http-addr $HTTP --pg-addr $PG 2>"$RUN/server.log" &
  pid=$!
  for _ in $(seq 300); do curl -sf "http://$HTTP/ready" >/dev/null && break; sleep 0.2; done
  sleep 3
  cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
  before=$(cpu)
  "$bin" bench write --url "http://$HTTP" --clients 2 --batch 100 --rate 25000 --days 14 \
    --duration "${SECS}s" --json >/dev/null 2>&1
  sleep 2
  after=$(cpu)
  segs=$(curl -sf -H "Content-Type: application/sql" --data-binary "SELECT sum(bytes) FROM system.segments" "http://$HTTP/v1/sql" | grep -o "\[\[[0-9]*\]\]" | tr -d "[]")
  counters=$(curl -sf "http://$HTTP/metrics" | awk '/^kiln_(compaction|flush)_duration_seconds_(sum|count)|^kiln_cube_parts_merged_total|^kiln_rows_compacted_total/ {printf "%s=%g ", $1, $2}')
  echo "$bin segment_bytes=$segs cpu_s=$(awk -v a="$before" -v b="$after" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", (b - a) / hz}') $counters"
  kill $pid; wait $pid 2>/dev/null || true
done
