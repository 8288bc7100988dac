#!/bin/bash
# seq.sh ROUNDS BIN... : one server at a time on /tmp/ab-a; warm 15 s, measure 20 s at 25 clients
R=$1; shift
for r in $(seq $R); do for B in "$@"; do
  $B serve --data-dir ${DIR:-/tmp/ab-a} --http-addr 127.0.0.1:18091 --pg-addr 127.0.0.1:15441 2>/tmp/ab-a.log &
  P=$!
  for i in $(seq 100); do curl -sf 127.0.0.1:18091/ready >/dev/null && break; sleep 0.3; done
  $B bench query --url postgres://127.0.0.1:15441 --clients ${C:-25} --duration 15s --seed 3 >/dev/null 2>&1
  echo -n "$B: "; $B bench query --url postgres://127.0.0.1:15441 --clients ${C:-25} --duration 20s --seed 7 2>/dev/null | tail -1
  kill $P; wait $P
done; done
