#!/bin/bash
# lvl.sh BIN DIR "LEVELS": instructions and CPU per query at each client level (one server)
B=$1; D=$2
$B serve --data-dir $D --http-addr 127.0.0.1:18091 --pg-addr 127.0.0.1:15441 2>/tmp/lvl.log &
P=$!
for i in $(seq 100); do curl -sf 127.0.0.1:18091/ready >/dev/null && break; sleep 0.3; done
$B bench query --url postgres://127.0.0.1:15441 --clients 25 --duration 10s --seed 3 >/dev/null 2>&1
for C in $3; do
  $B bench query --url postgres://127.0.0.1:15441 --clients $C --duration 5s --seed 3 >/dev/null 2>&1
  perf stat -e instructions,task-clock,context-switches -p $P -o /tmp/lvl.txt -- $B bench query --url postgres://127.0.0.1:15441 --clients $C --duration 20s --seed 7 2>/dev/null > /tmp/lvl.out
  Q=$(tail -1 /tmp/lvl.out | awk -F'|' '{print $3}')
  I=$(grep instructions /tmp/lvl.txt | awk '{print $1}'); T=$(grep task-clock /tmp/lvl.txt | awk '{print $1}'); CS=$(grep context-switches /tmp/lvl.txt | awk '{print $1}')
  echo "clients=$C $(tail -1 /tmp/lvl.out) instr/q=$(echo "$I / $Q / 1000000" | bc)M cpu_ms/q=$(echo "scale=2; $T / $Q" | bc) cs/q=$(echo "$CS / $Q" | bc)"
done
kill $P; wait $P
