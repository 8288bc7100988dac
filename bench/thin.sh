#!/usr/bin/env bash
# thin.sh BUILD... : a table spread thin over many days, as a backfill of
# years at a few readings a day makes it (crates/kiln-storage/src/segment.rs,
# `pack_days`). Per BUILD (a release kiln binary), in the order given, on a
# fresh data directory: DAYS days (default 20,000, from 1970-01-02) of ROWS
# rows each (default 5) written over HTTP, 100,000 rows a request, flushed by a
# clean stop; then a restart, timed until its first answer; the table's
# segments and its files' bytes; and three queries over HTTP and psycopg's
# simple protocol (15 runs each after 2 warm-up runs, median ms on the
# client): all rows, the middle day, the 30 days from it, a year-by-year
# chart. The table is sorted by sensor, so a segment of several days keeps
# each day's rows spread through it.
# With MEMORY=1, the queries also run while the rows are still in memory
# (the first start keeps them there with --flush-age 1h), 2 s after the
# last write (crates/kiln-storage/src/memstore/pack.rs).
# With THEN=<binary>, each BUILD's data directory is then opened by THEN,
# and how many segments are left after 5, 15, 30 and 60 s of its
# background compaction is printed (the same queries follow).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib/common.sh"
trap bench_cleanup EXIT
DAYS=${DAYS:-20000}
ROWS=${ROWS:-5}
DATA=$(mktemp -d /tmp/thin.XXXXXX)
python3 - "$DAYS" "$ROWS" > "$DATA/rows.ndjson" <<'PY'
import datetime, json, random, sys
days, rows = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(7)
t0 = datetime.datetime(1970, 1, 2)
for d in range(days):
    for k in range(rows):
        ts = t0 + datetime.timedelta(days=d, seconds=k * 86400 // rows)
        print(json.dumps({"ts": ts.isoformat(), "sensor": k, "v": rng.random()}))
PY
split -l 100000 "$DATA/rows.ndjson" "$DATA/rows.part"

# Stops the server started last, cleanly (a flush on close).
kiln_stop() {
  local pid=${BENCH_PIDS[-1]}
  kill "$pid"; wait "$pid" || true
  unset 'BENCH_PIDS[-1]'
}

segments() {
  kiln_sql "SELECT count(*), sum(bytes) FROM system.segments WHERE table_name = 'hist'" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["rows"][0]; print(f"segments {r[0]}, {(r[1] or 0)/1e6:.1f} MB")'
}

queries() {
  python3 - "$KILN_HTTP" "$KILN_PG_PORT" "$1" "$DAYS" <<'PY'
import datetime, json, statistics, sys, time, urllib.request
import psycopg
http, port, name, days = sys.argv[1:]
mid = datetime.date(1970, 1, 2) + datetime.timedelta(days=int(days) // 2)
qs = {
    "all rows": "SELECT count(*), sum(v) FROM hist",
    "one day": f"SELECT sensor, count(*), avg(v) FROM hist WHERE ts >= '{mid}' "
               f"AND ts < '{mid + datetime.timedelta(days=1)}' GROUP BY 1 ORDER BY 1",
    "30 days": f"SELECT sensor, count(*), avg(v) FROM hist WHERE ts >= '{mid}' "
               f"AND ts < '{mid + datetime.timedelta(days=30)}' GROUP BY 1 ORDER BY 1",
    "by year": "SELECT date_trunc('year', ts) AS y, count(*), avg(v) FROM hist GROUP BY 1 ORDER BY 1",
}
def over_http(q):
    req = urllib.request.Request(f"http://{http}/v1/sql", data=q.encode(),
                                 headers={"Content-Type": "application/sql"})
    return json.load(urllib.request.urlopen(req))["rows"]
with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="kiln",
                     autocommit=True) as c:
    def over_pg(q):
        return c.execute(q, prepare=False).fetchall()
    for label, q in qs.items():
        line = [f"{name:>12} {label:>9}"]
        for door, run in (("HTTP", over_http), ("pg", over_pg)):
            times = []
            for i in range(17):
                t = time.perf_counter()
                rows = run(q)
                if i >= 2:
                    times.append((time.perf_counter() - t) * 1e3)
            line.append(f"{door} {statistics.median(times):8.2f} ms")
        line.append(f"({len(rows)} rows; first {rows[0]})")
        print("  ".join(line))
PY
}

for KILN in "$@"; do
  NAME=$(basename "$KILN")
  DIR="$DATA/$NAME.$RANDOM"
  kiln_start "$DIR" --flush-age 1h
  kiln_sql "CREATE TABLE hist (ts TIMESTAMP NOT NULL, sensor BIGINT NOT NULL, v DOUBLE) WITH (sort_key = 'sensor')" >/dev/null
  for part in "$DATA"/rows.part*; do
    curl -sf "http://$KILN_HTTP/v1/write/hist" -H 'Content-Type: application/x-ndjson' \
      --data-binary @"$part" >/dev/null
  done
  if [ -n "${MEMORY:-}" ]; then
    sleep 2
    queries "$NAME mem"
  fi
  kiln_stop
  START=$(date +%s.%N)
  kiln_start "$DIR"
  kiln_sql "SELECT count(*) FROM hist" >/dev/null
  echo "$NAME: restart to first answer $(python3 -c "import time; print(f'{time.time() - $START:.2f}')") s, $(segments)"
  queries "$NAME"
  kiln_stop
  if [ -n "${THEN:-}" ]; then
    KILN_OLD=$KILN; KILN=$THEN
    kiln_start "$DIR" --background-interval 100ms
    for t in 5 15 30 60; do
      sleep $((t - ${LAST:-0})); LAST=$t
      echo "$NAME then $(basename "$THEN"): after $t s $(segments)"
    done
    LAST=0
    queries "$(basename "$THEN")"
    kiln_stop
    KILN=$KILN_OLD
  fi
done
rm -rf "$DATA"
