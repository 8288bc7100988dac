#!/bin/bash
# sustained.sh BUILD [SECS]: whether flushes keep up with writes at full
# rate. A fresh empty server (BUILD: a `kiln` release binary), the abtest
# table and the first two cubes of bench/cubes.sql, then `kiln bench
# write` with 16 writers of 1,000 rows for SECS (default 300) s. Every 10
# s prints the rows held in memory (`kiln_memstore_bytes`), flushes and
# rows flushed, and the writes that waited because their table's flushes
# fell behind (`kiln_writes_paced_total`, pacing seconds); then the write
# rate, the writes' p50 and p99 and how many writes were refused because
# rows waiting to be flushed filled `--memstore-max-bytes` (503).
set -u
BIN=$1; SECS=${2:-300}
HTTP=127.0.0.1:${HTTP_PORT:-18493}; PG=127.0.0.1:${PG_PORT:-15793}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUN=$(mktemp -d)
trap 'rm -rf "$RUN"' EXIT
"$BIN" serve --data-dir "$RUN/data" --http-addr $HTTP --pg-addr $PG 2>"$RUN/server.log" &
P=$!
for _ in $(seq 300); do curl -sf "http://$HTTP/ready" >/dev/null && break; sleep 0.2; done
sql() { curl -sf -H 'Content-Type: application/sql' --data-binary "$1" "http://$HTTP/v1/sql"; }
sql "$(cat "$ROOT/bench/sql/abtest.kiln.sql")" >/dev/null
grep -v '^--' "$ROOT/bench/cubes.sql" | tr '\n' ' ' | tr ';' '\n' | head -2 | while read -r stmt; do
  sql "$stmt" >/dev/null
done
"$BIN" bench write --url "http://$HTTP" --clients 16 --batch 1000 --duration "${SECS}s" --json \
  >"$RUN/write.json" 2>"$RUN/write.err" &
W=$!
start=$(date +%s)
while kill -0 $W 2>/dev/null; do
  sleep 10
  curl -sf "http://$HTTP/metrics" | awk -v t=$(($(date +%s) - start)) '
    /^kiln_memstore_bytes/ {m += $2}
    /^kiln_flushes_total/ {f = $2}
    /^kiln_rows_flushed_total/ {r = $2}
    /^kiln_writes_paced_total/ {p = $2}
    /^kiln_write_pace_seconds_total/ {w = $2}
    END {printf "%3d s memstore_MiB=%d flushes=%d rows_flushed=%d paced=%d pace_s=%.1f\n", t, m / 1048576, f, r, p, w}'
done
python3 -c 'import json; d=json.load(open("'"$RUN/write.json"'")); t=d["total"]; print("rows/s", round(d["rows_per_sec"]), "p50_ms", t["p50_ms"], "p99_ms", t["p99_ms"], "errors", t["errors"])'
echo "writes refused (memstore full): $(grep -c 'code="memstore_full"' "$RUN/server.log")"
kill $P; wait $P 2>/dev/null || true
