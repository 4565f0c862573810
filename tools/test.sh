#!/usr/bin/env bash
# Sets up (tools/setup.sh, and tools/setup_test_extras.sh for the API's browser and Python tests), builds and
# runs every test suite. Extra arguments go to ctest (e.g. -L unit).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/setup_test_extras.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
