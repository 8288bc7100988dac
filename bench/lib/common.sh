# Shared by the benchmark scripts: the kiln binary, a kiln server on free
# loopback ports, and a throwaway PostgreSQL cluster. Source it; it defines
# functions only. Servers are stopped by `bench_cleanup` (set as EXIT trap).

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kiln/target}"
BENCH_PIDS=()

# KILN: the release binary ($KILN_BIN, or built here).
kiln_binary() {
  if [ -n "${KILN_BIN:-}" ]; then KILN="$KILN_BIN"; return; fi
  (cd "$(dirname "${BASH_SOURCE[0]}")/../.." && cargo build --release --locked -p kiln >&2)
  KILN="$CARGO_TARGET_DIR/release/kiln"
}

# kiln_start DATA_DIR [flags...]: starts `$KILN serve` on free ports and sets
# KILN_HTTP (host:port) and KILN_PG_PORT. $KILN may carry a prefix command
# (e.g. `taskset -c 0 /path/kiln`), so it is expanded unquoted here.
kiln_start() {
  local dir="$1"; shift
  local log="$dir.log"
  $KILN serve --data-dir "$dir" --http-addr 127.0.0.1:0 --pg-addr 127.0.0.1:0 "$@" 2>"$log" &
  BENCH_PIDS+=($!)
  local line=""
  for _ in $(seq 600); do
    line=$(grep -m1 '^kiln listening' "$log" || true)
    [ -n "$line" ] && break
    sleep 0.1
  done
  [ -n "$line" ] || { echo "kiln serve did not start:" >&2; cat "$log" >&2; return 1; }
  KILN_HTTP=$(sed -E 's/.*http=([^ ]+).*/\1/' <<<"$line")
  KILN_PG_PORT=$(sed -E 's/.*pg=[^ ]*:([0-9]+).*/\1/' <<<"$line")
}

# kiln_sql SQL: runs SQL through the started server's HTTP door; prints
# its JSON answer, fails on an error.
kiln_sql() {
  curl -sf -H 'Content-Type: application/sql' --data-binary "$1" "http://$KILN_HTTP/v1/sql"
}

# kiln_cubes FILE: runs FILE's statements (CREATE CUBE, `--` comments
# dropped) on the started server, then waits until every cube is built.
kiln_cubes() {
  grep -v '^--' "$1" | tr '\n' ' ' | tr ';' '\n' | while read -r stmt; do
    if [ -n "${stmt// }" ]; then kiln_sql "$stmt" >/dev/null; fi
  done
  until kiln_sql "SELECT count(*) FROM system.cubes WHERE state <> 'ready'" |
    grep -q '"rows":\[\[0\]\]'; do sleep 0.2; done
}

# Installs Debian's PostgreSQL server (and pgbench) if missing; sets PG_BIN.
pg_install() {
  if ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
    local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq >&2
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql postgresql-contrib >/dev/null
  fi
  PG_BIN=$(dirname "$(ls -d /usr/lib/postgresql/*/bin/pg_ctl | sort -V | tail -1)")
}

# pg_start DIR: a fresh cluster on a free loopback port (PG_PORT), owned by
# the `postgres` user when run as root, trust auth, 300 connections.
pg_start() {
  local dir="$1"
  pg_install
  PG_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  PG_RUN=()
  if [ "$(id -u)" -eq 0 ]; then PG_RUN=(runuser -u postgres --); fi
  mkdir -p "$dir"; chmod 755 "$(dirname "$dir")" "$dir"
  [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
  "${PG_RUN[@]}" "$PG_BIN/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
  "${PG_RUN[@]}" "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/log" -w start -o \
    "-h 127.0.0.1 -p $PG_PORT -k $dir -c max_connections=300 -c shared_buffers=1GB -c fsync=on" >/dev/null
  PG_DIR="$dir"
}

pg_stop() {
  [ -n "${PG_DIR:-}" ] && "${PG_RUN[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m fast stop >/dev/null 2>&1 || true
  PG_DIR=""
}

bench_cleanup() {
  pg_stop
  for p in "${BENCH_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  # Only the servers: a script's other children (an S3 server) run on.
  for p in "${BENCH_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}
