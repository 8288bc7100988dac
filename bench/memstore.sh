#!/bin/bash
# memstore.sh : what unflushed rows hold in memory. A fresh server on an
# empty data directory gets the abtest table (and, with CUBES=1, the
# default, the cubes of bench/cubes.sql); `kiln bench write` streams rows
# into it at RATE rows/s for SECS s while `kiln bench query` runs the
# dashboard's aggregates at QUERY_CLIENTS clients (0: no queries), so the
# memstore is read as it fills. Every 5 s, and once the stream stops, it
# prints the table's memstore bytes (rows as counted at insert, and the
# cubes' states kept with in-memory batches) and the server's heap
# (counted at the allocator), and their ratio. SECS should end before the
# first flush (--flush-bytes, 96 MiB by default): the last line then
# compares the two over the same rows.
#
#   KILN_BIN=<release kiln> [RATE=25000] [SECS=15] [QUERY_CLIENTS=20]
#   [CUBES=1] bench/memstore.sh
set -eu
BIN=${KILN_BIN:?set KILN_BIN to a release build of kiln}
RATE=${RATE:-25000}; SECS=${SECS:-15}; QC=${QUERY_CLIENTS:-20}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HTTP=127.0.0.1:18193; PG=15543; DIR=/tmp/memstore-run

rm -rf "$DIR"
"$BIN" serve --data-dir "$DIR" --http-addr $HTTP --pg-addr 127.0.0.1:$PG 2>/tmp/memstore-server.log &
P=$!
LOADS=""
trap 'kill $P $LOADS 2>/dev/null || true' EXIT
for _ in $(seq 200); do curl -sf "http://$HTTP/ready" >/dev/null && break; sleep 0.3; done
sql() { curl -sf -H 'Content-Type: application/sql' --data-binary "$1" "http://$HTTP/v1/sql"; }
sql "$(cat "$ROOT/bench/sql/abtest.kiln.sql")" >/dev/null
if [ "${CUBES:-1}" = 1 ]; then
  grep -v '^--' "$ROOT/bench/cubes.sql" | tr '\n' ' ' | tr ';' '\n' | while read -r stmt; do
    [ -n "${stmt// }" ] && sql "$stmt" >/dev/null
  done
fi

held() {
  curl -sf "http://$HTTP/metrics" | python3 -c '
import sys
m = {}
for l in sys.stdin:
    if l.startswith(("kiln_memstore_bytes", "kiln_heap_bytes", "kiln_flushes_total")):
        k, v = l.rsplit(" ", 1)
        m[k.split("{")[0]] = float(v)
mem, heap = m.get("kiln_memstore_bytes", 0), m.get("kiln_heap_bytes", 0)
ratio = round(heap / mem, 2) if mem else "-"
flushes = int(m.get("kiln_flushes_total", 0))
print(f"memstore {mem / 2**20:.1f} MiB  heap {heap / 2**20:.1f} MiB  heap/memstore {ratio}  flushes {flushes}")'
}

"$BIN" bench write --url "http://$HTTP" --clients 2 --batch 100 --rate "$RATE" \
  --duration "${SECS}s" --seed 1 --json >/tmp/memstore-write.json 2>/dev/null &
LOADS=$!
if [ "$QC" -gt 0 ]; then
  "$BIN" bench query --url "postgres://127.0.0.1:$PG" --protocol pg-simple --clients "$QC" \
    --duration "${SECS}s" --seed 7 --workload aggregates >/dev/null 2>&1 &
  LOADS="$LOADS $!"
fi
for _ in $(seq $((SECS / 5))); do sleep 5; held; done
wait $LOADS
echo "after the stream: $(held)"
