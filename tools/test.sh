#!/usr/bin/env bash
# Sets up (tools/setup.sh), builds and runs every test suite. Extra arguments go to ctest (e.g. -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
