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
# bitmaps Kiln writes, and curl (Debian) for https.
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
if ! python3 -c 'import pyroaring, psycopg, sqlalchemy, pandas' 2>/dev/null; then
  python3 -m pip install -q pyroaring "psycopg[binary]" "sqlalchemy>=2" pandas
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
