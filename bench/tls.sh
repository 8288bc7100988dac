#!/usr/bin/env bash
# TLS against plaintext on both ports of one `kiln serve` (TLS optional, so
# the same server answers both), alternating, ROUNDS times each:
#  1. pgbench `SELECT 1` (-n -M prepared -j 2) at 16 and 64 connections,
#     PGSSLMODE=disable against PGSSLMODE=require;
#  2. `kiln bench write` (1 row per request, ack=memory so the server's CPU,
#     not fsync, is the limit) with 64 and 512 clients, http:// against
#     https:// (the client trusts the test CA with --ca-cert).
# The certificate is ECDSA P-256, made here with the openssl CLI.
# Usage: bench/tls.sh [SECONDS=10] [ROUNDS=3]
# Prints one line per run, then Markdown tables of the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib/common.sh
SECS="${1:-10}"
ROUNDS="${2:-3}"
trap bench_cleanup EXIT

kiln_binary
WORK=$(mktemp -d /tmp/kiln-tls-bench.XXXX)
(
  cd "$WORK"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout ca.key -out ca.pem -days 2 -subj "/CN=Kiln bench CA" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >ext
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out server.pem -days 2 -extfile ext 2>/dev/null
)
kiln_start "$WORK/data" --tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key"
HTTP_PORT="${KILN_HTTP##*:}"
printf 'SELECT 1;\n' >"$WORK/select1.sql"

pgbench_tps() { # pgbench_tps SSLMODE CLIENTS
  PGSSLMODE="$1" pgbench -n -M prepared -f "$WORK/select1.sql" -c "$2" -j 2 -T "$SECS" \
    -h localhost -p "$KILN_PG_PORT" -U postgres postgres 2>&1 |
    sed -nE 's/^tps = ([0-9.]+) \(without initial connection time\)/\1/p'
}
write_rows() { # write_rows URL CLIENTS
  "$KILN" bench write --url "$1" --ca-cert "$WORK/ca.pem" --clients "$2" --batch 1 \
    --ack memory --duration "${SECS}s" --json 2>/dev/null |
    python3 -c 'import json,sys; print(round(json.load(sys.stdin)["rows_per_sec"]))'
}

declare -A R
for round in $(seq "$ROUNDS"); do
  for c in 16 64; do
    for mode in disable require; do
      R[pg-$c-$mode-$round]=$(pgbench_tps "$mode" "$c")
      echo "round $round pgbench select1 c=$c sslmode=$mode tps=${R[pg-$c-$mode-$round]}" >&2
    done
  done
  for c in 64 512; do
    for scheme in http https; do
      R[w-$c-$scheme-$round]=$(write_rows "$scheme://localhost:$HTTP_PORT" "$c")
      echo "round $round write c=$c $scheme rows/s=${R[w-$c-$scheme-$round]}" >&2
    done
  done
done

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
row() { # row LABEL CLIENTS PREFIX PLAIN TLS
  local plain=() tls=() ratios=()
  for round in $(seq "$ROUNDS"); do
    local p="${R[$3-$2-$4-$round]}" t="${R[$3-$2-$5-$round]}"
    plain+=("$p"); tls+=("$t")
    ratios+=("$(awk -v a="$t" -v b="$p" 'BEGIN { printf "%.2f", a / b }')")
  done
  local mp mt
  mp=$(median "${plain[@]}"); mt=$(median "${tls[@]}")
  echo "| $1 | $2 | ${plain[*]} | ${tls[*]} | $(printf '%.0f' "$mp") | $(printf '%.0f' "$mt") | $(awk -v a="$mt" -v b="$mp" 'BEGIN { printf "%.2fx", a / b }') | ${ratios[*]} |"
}
echo
echo "| what | clients | plaintext runs | TLS runs | plaintext median | TLS median | TLS / plaintext (medians) | per-round ratios |"
echo "|---|---:|---|---|---:|---:|---:|---|"
for c in 16 64; do row "pgbench select1 q/s" "$c" pg disable require; done
for c in 64 512; do row "HTTP write rows/s" "$c" w http https; done
