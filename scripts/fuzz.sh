#!/usr/bin/env bash
# Runs every fuzz target (fuzz/, cargo-fuzz on nightly, libFuzzer with
# AddressSanitizer) for a bounded time each: scripts/fuzz.sh [SECONDS]
# (default 60). A crash leaves its input under fuzz/artifacts/<target>/;
# add it to crates/kiln-fuzz-targets/tests/ as a regression input.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH="${1:-60}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kiln/fuzz-target}"
rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cd fuzz
for target in ndjson csv arrow_ipc parquet wal_payload cube_distinct_state pg_message sql; do
  echo "== $target (${SECONDS_EACH}s)"
  cargo +nightly fuzz run "$target" -- -max_total_time="$SECONDS_EACH" -rss_limit_mb=4096 -max_len=65536
done
