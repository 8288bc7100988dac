#!/usr/bin/env bash
# The dashboard workload with storage on S3 against local disk: one binary,
# one data set, one run. S3 is moto's server on loopback (PyPI
# `moto[server]`), so "cold" figures measure a slow, local S3 stand-in, not
# AWS; the warm figures are what the issue targets: a warm cache sends no
# data request at all.
#  1. `kiln import` of the A/B data into a local data directory and into
#     s3://kiln-bench/<run> (segments written and committed): import time.
#  2. Local disk: `kiln serve`, warm-up, then `kiln bench query` (pg wire,
#     prepared statements) for DURATION at CLIENTS clients.
#  3. S3 with an empty disk cache: a cold run first (q/s, bytes and
#     requests fetched from the store), then a warm run; then a restart,
#     which keeps the disk cache: a third run. Time to warm: from a cold
#     start, 2 s rounds of the same load until one sends the store no GET.
#  4. Writes: WROWS rows streamed over HTTP in six loads 1.5 s apart into a
#     fresh server on each storage with 1 s flushes, then idle until
#     compaction is done: rows
#     per second of flush and of compaction (kiln_rows_flushed_total over
#     kiln_flush_duration_seconds_sum, the same for compaction).
# Run it twice: with the defaults (the decoded-segment cache above the
# object cache answers most scans), and with KILN_SEGMENT_CACHE_BYTES=0 in
# the environment, so every scan reads Parquet through the object cache.
# Usage: bench/s3.sh [ROWS=2000000] [DURATION=20s] [CLIENTS=25] [WROWS=2000000]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.sh
ROWS="${1:-2000000}"
DURATION="${2:-20s}"
CLIENTS="${3:-25}"
WROWS="${4:-2000000}"
trap 'bench_cleanup; kill ${MOTO_PID:-} 2>/dev/null || true' EXIT

kiln_binary
WORK=$(mktemp -d /tmp/kiln-s3-bench.XXXX)
python3 -c 'import moto.server' 2>/dev/null || python3 -m pip install -q "moto[server]>=5.1"
"$KILN" gen abtest --rows "$ROWS" --seed 42 --out "$WORK/abtest.parquet" >/dev/null
MOTO_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m moto.server -H 127.0.0.1 -p "$MOTO_PORT" >/dev/null 2>&1 &
MOTO_PID=$!
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$MOTO_PORT/" && break; sleep 0.2; done
curl -sf -X PUT "http://127.0.0.1:$MOTO_PORT/kiln-bench" >/dev/null
S3=(--storage "s3://kiln-bench/run" --s3-endpoint "http://127.0.0.1:$MOTO_PORT" --s3-allow-http
    --s3-access-key-id bench --s3-secret-access-key bench)

import_into() { # import_into DIR [flags...]: prints seconds
  local dir="$1"; shift
  "$KILN" sql --data-dir "$dir" "$@" "$(cat bench/sql/abtest.kiln.sql)" >/dev/null
  local t0; t0=$(date +%s.%N)
  "$KILN" import --data-dir "$dir" "$@" --table abtest "$WORK/abtest.parquet" >/dev/null
  python3 -c "import sys; print(round($(date +%s.%N) - $t0, 2))"
}
cache_figure() { # cache_figure LAYER METRIC
  curl -s -H 'Content-Type: application/sql' -H 'X-Kiln-Request: 1' --data-binary \
    "SELECT value FROM system.cache WHERE layer = '$1' AND metric = '$2'" \
    "http://$KILN_HTTP/v1/sql" | python3 -c 'import json,sys; r=json.load(sys.stdin)["rows"]; print(r[0][0] if r else 0)'
}
run() { # run LABEL: one measured run; prints its line
  local b0 g0 out b1 g1
  b0=$(cache_figure store fetched_bytes); g0=$(cache_figure store gets)
  out=$("$KILN" bench query --url "postgres://127.0.0.1:$KILN_PG_PORT" --clients "$CLIENTS" \
    --duration "$DURATION" --workload dashboard --seed 7 2>/dev/null | tail -1)
  b1=$(cache_figure store fetched_bytes); g1=$(cache_figure store gets)
  echo "$1: $out | store gets +$((g1 - g0)), fetched bytes +$((b1 - b0))"
}

echo "import local: $(import_into "$WORK/local") s"
echo "import s3:    $(import_into "$WORK/s3" "${S3[@]}") s"
echo "bucket: $(python3 - "$MOTO_PORT" <<'PY'
import boto3, sys
s3 = boto3.client('s3', endpoint_url=f'http://127.0.0.1:{sys.argv[1]}', aws_access_key_id='b',
                  aws_secret_access_key='b', region_name='us-east-1')
objs = [o for p in s3.get_paginator('list_objects_v2').paginate(Bucket='kiln-bench') for o in p.get('Contents', [])]
print(len(objs), 'objects,', sum(o['Size'] for o in objs), 'bytes')
PY
)"

kiln_start "$WORK/local"
"$KILN" bench query --url "postgres://127.0.0.1:$KILN_PG_PORT" --clients "$CLIENTS" --duration 10s --seed 3 >/dev/null 2>&1
run "local warm"
bench_cleanup; BENCH_PIDS=()

rm -rf "$WORK/s3/cache"
kiln_start "$WORK/s3" "${S3[@]}"
run "s3 cold"
run "s3 warm"
bench_cleanup; BENCH_PIDS=()
kiln_start "$WORK/s3" "${S3[@]}"
run "s3 restarted"
bench_cleanup; BENCH_PIDS=()

# Time to warm: 2 s rounds from an empty cache until a round sends no GET.
rm -rf "$WORK/s3/cache"
kiln_start "$WORK/s3" "${S3[@]}"
t0=$(date +%s.%N)
for round in $(seq 60); do
  g0=$(cache_figure store gets)
  "$KILN" bench query --url "postgres://127.0.0.1:$KILN_PG_PORT" --clients "$CLIENTS" \
    --duration 2s --workload dashboard --seed "$round" >/dev/null 2>&1
  [ "$(cache_figure store gets)" = "$g0" ] && break
done
echo "s3 time to warm: $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s ($round rounds of 2 s)"
bench_cleanup; BENCH_PIDS=()

metric() { # metric NAME: its value in /metrics
  curl -s "http://$KILN_HTTP/metrics" | awk -v n="$1" '$1 == n { print $2 }'
}
write_phase() { # write_phase LABEL DIR [flags...]
  local label="$1" dir="$2"; shift 2
  kiln_start "$dir" --flush-age 1s "$@"
  "$KILN" sql --url "http://$KILN_HTTP" "$(cat bench/sql/abtest.kiln.sql)" >/dev/null
  local t0 last="" now; t0=$(date +%s.%N)
  # Six loads 1.5 s apart: six flushes, so each day gets enough small
  # segments to be compacted.
  for i in 1 2 3 4 5 6; do
    "$KILN" gen abtest --rows $((WROWS / 6)) --seed "$i" --load "http://$KILN_HTTP" >/dev/null
    sleep 1.5
  done
  local load_s; load_s=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")
  for _ in $(seq 120); do # until flushes and compactions stop for 5 s
    sleep 5
    now="$(metric kiln_flushes_total) $(metric kiln_compactions_total)"
    [ "$now" = "$last" ] && break
    last="$now"
  done
  python3 - "$label" "$load_s" "$(metric kiln_rows_flushed_total)" \
    "$(metric kiln_flush_duration_seconds_sum)" "$(metric kiln_flushes_total)" \
    "$(metric kiln_rows_compacted_total)" "$(metric kiln_compaction_duration_seconds_sum)" \
    "$(metric kiln_compactions_total)" <<'PY'
import sys
label, load_s, fr, fs, fn, cr, cs, cn = sys.argv[1:]
fr, fs, cr, cs = int(float(fr)), float(fs), int(float(cr or 0)), float(cs or 0)
print(f"{label}: load {load_s} s; {fn} flushes, {fr} rows in {fs:.1f} s = {fr / fs:,.0f} rows/s; "
      f"{cn} compactions, {cr} rows in {cs:.1f} s = {(cr / cs if cs else 0):,.0f} rows/s")
PY
  bench_cleanup; BENCH_PIDS=()
}
write_phase "writes local" "$WORK/wlocal"
S3W=("${S3[@]}"); S3W[1]="s3://kiln-bench/writes"
write_phase "writes s3" "$WORK/ws3" "${S3W[@]}"
