#!/usr/bin/env bash
# Runs every Kiln test: the lint gate (rustfmt, clippy with warnings as
# errors), unit tests, sqllogictest files, end-to-end and crash tests against
# the real binary, and the storage crash-point tests (failpoints). Installs
# what the tests need first.
set -euo pipefail
cd "$(dirname "$0")/.."

# Reuse one build directory across clones of the repository (CI clones afresh).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kiln/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

if ! command -v cargo >/dev/null; then
  echo "cargo is required (https://rustup.rs)" >&2
  exit 1
fi

# Real clients used by the end-to-end tests: psql (Debian's postgresql-client),
# psycopg, SQLAlchemy and pandas (PyPI) for the client conformance suite,
# pgjdbc (Maven Central, fetched by mvn itself; run with a JDK 17+), pgx (Go
# modules, fetched by go itself), node-postgres (npm, installed by the test
# with `npm ci`; Debian's nodejs and npm), pyroaring (PyPI) to read
# bitmaps Kiln writes, curl (Debian) for https, and moto's S3 server (PyPI)
# for the object-storage tests.
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
APT_UPDATED=""
apt_install() {
  [ -n "$APT_UPDATED" ] || $SUDO apt-get update -qq
  APT_UPDATED=1
  $SUDO apt-get install -y -qq "$@" >/dev/null
}
if ! command -v psql >/dev/null; then
  apt_install postgresql-client
fi
if ! command -v curl >/dev/null; then
  apt_install curl
fi
if ! command -v mvn >/dev/null || ! command -v java >/dev/null; then
  apt_install maven default-jdk-headless
fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  apt_install nodejs npm
fi
if ! command -v go >/dev/null; then
  echo "go is required for the pgx client check (https://go.dev/dl/)" >&2
  exit 1
fi
if ! python3 -c 'import pyroaring, psycopg, sqlalchemy, pandas, moto.server, boto3' 2>/dev/null; then
  python3 -m pip install -q pyroaring "psycopg[binary]" "sqlalchemy>=2" pandas "moto[server]>=5.1"
fi

# Lint gate: formatting first (seconds), then clippy over every target.
if ! command -v rustfmt >/dev/null || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi
cargo fmt --all -- --check
cargo clippy --locked --workspace --all-targets -- -D warnings

cargo build --locked --workspace --all-targets
cargo test --locked --workspace --no-fail-fast -- --test-threads 2
# Crash points of flush, compaction and manifest commit (the `failpoints`
# feature compiles them in; they share a global registry, so one at a time).
cargo test --locked -p kiln-storage --features failpoints --test crash_points -- --test-threads 1

# The SQL, write, crash and consistency suites again with segments,
# manifests and the catalog on S3: one moto server on a loopback port it
# picks itself (port 0; its log names the port), one bucket, a prefix per
# data directory (kiln_storage::testing).
MOTO_LOG=$(mktemp)
python3 -m moto.server -H 127.0.0.1 -p 0 >/dev/null 2>"$MOTO_LOG" &
MOTO_PID=$!
trap 'kill $MOTO_PID 2>/dev/null || true; rm -f "$MOTO_LOG"' EXIT
MOTO_PORT=
for _ in $(seq 300); do
  MOTO_PORT=$(sed -n 's|.*Running on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$MOTO_LOG" | head -1)
  [ -n "$MOTO_PORT" ] && break
  sleep 0.2
done
[ -n "$MOTO_PORT" ] || { echo "moto did not start:"; cat "$MOTO_LOG"; exit 1; }
curl -sf -X PUT "http://127.0.0.1:$MOTO_PORT/kiln-test" >/dev/null
KILN_TEST_S3_ENDPOINT="http://127.0.0.1:$MOTO_PORT" KILN_TEST_S3_BUCKET=kiln-test \
  cargo test --locked -p kiln-query --test slt --test consistency -p kiln --test crash --test load \
  --no-fail-fast -- --test-threads 2
