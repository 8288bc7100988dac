#!/usr/bin/env bash
# Builds Kiln (release) and starts its main job with the embedded default:
# data in ./kiln-data, nothing else to configure. Extra arguments are passed on.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/kiln/target}"
cargo build --locked --release -p kiln
exec "$CARGO_TARGET_DIR/release/kiln" serve "$@"
