#!/usr/bin/env bash
# Runs every Kiln test: unit tests, sqllogictest files, end-to-end and crash
# tests against the real binary. Installs what the tests need first.
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
# psycopg (PyPI) for prepared statements and cancel, and pyroaring (PyPI) to
# read bitmaps Kiln writes.
if ! command -v psql >/dev/null; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq postgresql-client >/dev/null
fi
if ! python3 -c 'import pyroaring, psycopg' 2>/dev/null; then
  python3 -m pip install -q pyroaring "psycopg[binary]"
fi

cargo build --locked --workspace --all-targets
cargo test --locked --workspace --no-fail-fast -- --test-threads 2
