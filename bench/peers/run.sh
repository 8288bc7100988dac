#!/usr/bin/env bash
# The dashboard workload (bench/workload/dashboard) on DuckDB, chDB and
# PostgreSQL, then on Kiln, with one Markdown table of q/s and latency per
# concurrency level. See bench/peers/README.md.
#
# Usage: bench/peers/run.sh [--rows N] [--clients 1,15,25,50,75,100,150] [--duration 60s]
#                           [--seed 1] [--engines duckdb,chdb,postgres,kiln] [--parquet FILE] [--check]
# Environment: KILN_BIN (default: cargo build --release -p kiln into
# CARGO_TARGET_DIR, default ~/.cache/kiln/target), BENCH_DIR (work and results,
# default /tmp/kiln-peers), PEERS_VENV (default ~/.cache/kiln/peers-venv).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
PEERS="$ROOT/bench/peers"
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree

ROWS=10000000 CLIENTS=1,15,25,50,75,100,150 DURATION=60s SEED=1
ENGINES=duckdb,chdb,postgres,kiln PARQUET="" CHECK=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS="$2"; shift 2 ;;
    --clients) CLIENTS="$2"; shift 2 ;;
    --duration) DURATION="$2"; shift 2 ;;
    --seed) SEED="$2"; shift 2 ;;
    --engines) ENGINES="$2"; shift 2 ;;
    --parquet) PARQUET="$(realpath "$2")"; shift 2 ;;
    --check) CHECK=1; shift ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done
has() { [[ ",$ENGINES," == *",$1,"* ]]; }

OUT="${BENCH_DIR:-/tmp/kiln-peers}"
RES="$OUT/results/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$RES" "$OUT/engines"
log() { echo "== $*" >&2; }

# Servers started here are stopped on any exit.
KILN_PID=""
cleanup() {
  if [ -n "$KILN_PID" ] && kill -0 "$KILN_PID" 2>/dev/null; then
    kill "$KILN_PID" 2>/dev/null || true; wait "$KILN_PID" 2>/dev/null || true
  fi
  local f data ctl
  for f in "$OUT"/engines/postgres/pgdata.path; do
    [ -f "$f" ] || continue
    data="$(cat "$f")"
    [ -f "$data/postmaster.pid" ] || continue
    ctl="$(ls /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | sort -V | tail -1)"; ctl="${ctl:-pg_ctl}"
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$ctl" -D "$data" -m immediate stop >/dev/null 2>&1 || true
    else "$ctl" -D "$data" -m immediate stop >/dev/null 2>&1 || true; fi
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- what the peers need: Python packages in a venv, PostgreSQL from apt ----
apt_install() {
  local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}
VENV="${PEERS_VENV:-$HOME/.cache/kiln/peers-venv}"
if [ ! -x "$VENV/bin/python" ]; then
  log "Python venv $VENV"
  command -v python3 >/dev/null || apt_install python3
  python3 -m venv "$VENV" 2>/dev/null || { rm -rf "$VENV"; apt_install python3-venv; python3 -m venv "$VENV"; }
fi
PY="$VENV/bin/python"
need=(pyarrow)
has duckdb && need+=(duckdb)
has chdb && need+=(chdb)
{ has postgres || [ "$CHECK" = 1 ]; } && need+=("psycopg[binary]")
missing=()
for p in "${need[@]}"; do
  mod="${p%%[*}"; "$PY" -c "import $mod" 2>/dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then log "pip install ${missing[*]}"; "$PY" -m pip install -q "${missing[@]}"; fi
if has postgres && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  log "apt-get install postgresql"; apt_install postgresql
fi
# The distro package starts its own cluster on 5432; ours is separate (own dir, free port).

# ---- Kiln binary (to generate the data and for the kiln engine) ----
if has kiln || [ -z "$PARQUET" ]; then
  if [ -z "${KILN_BIN:-}" ]; then
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kiln/target}"
    log "cargo build --release -p kiln"
    (cd "$ROOT" && cargo build --release -p kiln)
    KILN_BIN="$CARGO_TARGET_DIR/release/kiln"
  fi
fi

# ---- data ----
if [ -z "$PARQUET" ]; then
  PARQUET="$OUT/abtest-$ROWS.parquet"
  if [ ! -s "$PARQUET" ]; then
    log "generate $ROWS rows -> $PARQUET"
    "$KILN_BIN" gen abtest --rows "$ROWS" --seed 42 --out "$PARQUET.tmp.parquet"
    mv "$PARQUET.tmp.parquet" "$PARQUET"
  fi
fi
log "data: $PARQUET; results: $RES"
"$PY" - "$PARQUET" "$RES/versions.txt" <<'EOF'
import importlib.metadata as m, platform, sys, os
import pyarrow.parquet as pq
names = ["duckdb", "chdb", "psycopg", "pyarrow"]
lines = [f"rows {pq.ParquetFile(sys.argv[1]).metadata.num_rows}", f"cpus {os.cpu_count()}",
         f"python {platform.python_version()}"]
lines += [f"{n} {m.version(n)}" for n in names if any(d.metadata["Name"] == n for d in m.distributions())]
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
EOF

# ---- peers ----
for e in duckdb chdb postgres; do
  has "$e" || continue
  log "$e: clients $CLIENTS, $DURATION each"
  "$PY" "$PEERS/bench.py" --engine "$e" --parquet "$PARQUET" --workdir "$OUT/engines" \
    --clients "$CLIENTS" --duration "$DURATION" --seed "$SEED" --out "$RES/$e.json" >/dev/null \
    || log "$e FAILED (see above); going on"
done
PEER_LIST="$(echo "$ENGINES" | tr , '\n' | { grep -vx kiln || true; } | paste -sd, -)"  # empty: Kiln alone

# ---- Kiln ----
if has kiln; then
  KDIR="$OUT/kiln-data"
  # Segments are encoded at import: a new codec setting means a new import.
  export KILN_SEGMENT_COMPRESSION="${KILN_SEGMENT_COMPRESSION:-lz4}"
  STAMP="$(stat -c '%n %s %Y' "$PARQUET") $(md5sum < "$ROOT/bench/sql/abtest.kiln.sql") $KILN_SEGMENT_COMPRESSION"
  if [ "$(cat "$KDIR/.peers-stamp" 2>/dev/null)" != "$STAMP" ]; then
    log "kiln: import $PARQUET"
    rm -rf "$KDIR"
    "$KILN_BIN" sql --data-dir "$KDIR" "$(cat "$ROOT/bench/sql/abtest.kiln.sql")" >/dev/null
    "$KILN_BIN" import --data-dir "$KDIR" --table abtest "$PARQUET"
    mkdir -p "$KDIR"; echo "$STAMP" > "$KDIR/.peers-stamp"
  fi
  "$KILN_BIN" serve --data-dir "$KDIR" --http-addr 127.0.0.1:0 --pg-addr 127.0.0.1:0 2>"$RES/kiln-serve.log" &
  KILN_PID=$!
  PGPORT=""
  for _ in $(seq 1 600); do
    PGPORT="$(grep -m1 -o 'kiln listening http=[^ ]* pg=[0-9.]*:[0-9]*' "$RES/kiln-serve.log" 2>/dev/null \
      | sed 's/.*pg=.*://' || true)"
    [ -n "$PGPORT" ] && break
    kill -0 "$KILN_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$PGPORT" ]; then
    log "kiln serve did not start:"; tail -20 "$RES/kiln-serve.log" >&2; exit 1
  fi
  log "kiln: pg port $PGPORT; clients $CLIENTS, $DURATION each"
  "$KILN_BIN" bench query --url "postgres://127.0.0.1:$PGPORT" --clients "$CLIENTS" --duration "$DURATION" \
    --workload dashboard --seed "$SEED" --json > "$RES/kiln.json" || log "kiln bench FAILED; going on"
  if [ "$CHECK" = 1 ]; then
    log "check: same answers on ${PEER_LIST:+$PEER_LIST,}kiln"
    "$PY" "$PEERS/check_results.py" --parquet "$PARQUET" --workdir "$OUT/engines" --engines "$PEER_LIST" \
      --kiln-url "postgres://kiln@127.0.0.1:$PGPORT/kiln" | tee "$RES/check.md" || true
  fi
  kill "$KILN_PID"; wait "$KILN_PID" 2>/dev/null || true; KILN_PID=""
elif [ "$CHECK" = 1 ] && [ -n "$PEER_LIST" ]; then
  log "check: same answers on $PEER_LIST"
  "$PY" "$PEERS/check_results.py" --parquet "$PARQUET" --workdir "$OUT/engines" --engines "$PEER_LIST" \
    | tee "$RES/check.md" || true
fi

# ---- one table ----
log "report ($RES/report.md)"
{ echo "$(basename "$PARQUET"): $(paste -sd, "$RES/versions.txt" | sed 's/,/, /g'); $DURATION per level, seed $SEED"; echo
  "$PY" "$PEERS/report.py" "$RES"; } | tee "$RES/report.md"
