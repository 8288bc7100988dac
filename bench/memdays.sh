#!/bin/bash
# memdays.sh : what a write spread over many days reserves. A fresh server
# gets a table and, first, enough rows in one day to freeze a batch (so a
# size hint exists); then one write of one row to each of DAYS other days.
# Prints the server's address space (VmSize) and resident memory (VmRSS)
# before and after that write, the memstore's counted bytes, and how long
# `count(*)` takes over the rows.
#
#   KILN_BIN=<release kiln> [DAYS=20000] bench/memdays.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib/common.sh"
trap bench_cleanup EXIT
kiln_binary
DAYS=${DAYS:-20000}
DIR=$(mktemp -d /tmp/memdays.XXXXXX)
kiln_start "$DIR/data"
PID=${BENCH_PIDS[0]}
kiln_sql "CREATE TABLE t (ts TIMESTAMP NOT NULL, s VARCHAR, v BIGINT)" >/dev/null
vm() {
  local m
  m=$(curl -sf "http://$KILN_HTTP/metrics" | awk '/^kiln_memstore_bytes/ {s += $2} END {print s / 2^20}')
  awk -v m="$m" -v what="$1" '/^VmSize|^VmRSS/ {v[$1] = $2 / 1024}
    END {printf "%-26s VmSize %9.1f MiB  VmRSS %7.1f MiB  memstore %6.1f MiB\n", what, v["VmSize:"], v["VmRSS:"], m}' "/proc/$PID/status"
}
python3 -c "
import json
for i in range(80000):
    print(json.dumps({'ts': '2026-01-01T00:00:%02d' % (i % 60), 's': 'x' * 60 + str(i), 'v': i}))
" >"$DIR/one-day.ndjson"
python3 -c "
import datetime, json
d0 = datetime.date(1970, 1, 1)
for i in range($DAYS):
    print(json.dumps({'ts': str(d0 + datetime.timedelta(days=i)) + 'T00:00:00', 's': 'y', 'v': i}))
" >"$DIR/days.ndjson"
post() { curl -sf -H 'Content-Type: application/x-ndjson' --data-binary "@$1" "http://$KILN_HTTP/v1/write/t" >/dev/null; }
vm "started"
post "$DIR/one-day.ndjson"
vm "80,000 rows in one day"
post "$DIR/days.ndjson"
vm "then 1 row in $DAYS days"
kiln_sql "SELECT count(*) FROM t" | python3 -c 'import json, sys; d = json.load(sys.stdin); print("count(*):", d["rows"][0][0], "in", round(d["elapsed_ms"], 1), "ms")'
rm -rf "$DIR"
