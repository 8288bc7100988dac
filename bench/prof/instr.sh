#!/bin/bash
# Measurement helpers for docs/benchmarks.md and docs/benchmark-history.md (see bench/prof/README.md).
HERE="$(cd "$(dirname "$0")" && pwd)"; PY="${PY:-$HOME/.cache/kiln/peers-venv/bin/python}"
# instr.sh BIN... : per binary, serve /tmp/ab-a, warm, then count the server's instructions and task-clock over mix.py's 15 queries x 10 params (single client)
for B in "$@"; do
  $B serve --data-dir ${DIR:-/tmp/ab-a} --http-addr 127.0.0.1:18091 --pg-addr 127.0.0.1:15441 2>/tmp/ab-a.log &
  P=$!
  for i in $(seq 100); do curl -sf 127.0.0.1:18091/ready >/dev/null && break; sleep 0.3; done
  sleep 8
  "$PY" "$HERE"/mix.py 15441 4 >/dev/null
  perf stat -e instructions,task-clock -p $P -o /tmp/instr.$$.txt -- "$PY" "$HERE"/mix.py 15441 ${N:-10} > /tmp/mix.$$.txt
  echo "$B: $(grep -E 'instructions|task-clock' /tmp/instr.$$.txt | awk '{print $1, $2}' | tr '\n' ' ') sum_ms=$(tail -1 /tmp/mix.$$.txt | awk '{print $2}')"
  [ -n "$SHOW" ] && cat /tmp/mix.$$.txt
  kill $P; wait $P
done
