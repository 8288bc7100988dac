#!/bin/bash
# Measurement helpers for docs/benchmarks.md and docs/benchmark-history.md (see bench/prof/README.md).
HERE="$(cd "$(dirname "$0")" && pwd)"; PY="${PY:-$HOME/.cache/kiln/peers-venv/bin/python}"
# qinstr.sh "QUERY_PREFIXES" BIN... : instructions per query over 10 runs each
# (EV=task-clock: CPU ms instead, where the machine has no hardware counters)
EV="${EV:-instructions}"
for B in "${@:2}"; do
  $B serve --data-dir ${DIR:-/tmp/ab-a} --http-addr 127.0.0.1:18091 --pg-addr 127.0.0.1:15441 2>/tmp/ab-a.log &
  P=$!
  for i in $(seq 100); do curl -sf 127.0.0.1:18091/ready >/dev/null && break; sleep 0.3; done
  sleep 8
  echo -n "$(basename $B):"
  for q in $1; do
    "$PY" "$HERE"/one.py 15441 $q 3
    perf stat -e "$EV" -p $P -o /tmp/qi.txt -- "$PY" "$HERE"/one.py 15441 $q 10
    if [ "$EV" = instructions ]; then
      echo -n " $q=$(grep instructions /tmp/qi.txt | awk '{printf "%.0f", $1/1e6}')M"
    else
      echo -n " $q=$(grep "$EV" /tmp/qi.txt | awk '{print $1}' | tr -d ,)ms"
    fi
  done; echo
  kill $P; wait $P
done
