#!/usr/bin/env bash
# Runs a Python test of the API with the project's virtual environment (.venv, made by tools/setup.sh) when it
# exists, else with python3; the test itself exits 77 (skipped) when a package it needs is missing.
#   tests/api/python_test.sh SCRIPT ARGS...
root="$(cd "$(dirname "$0")/../.." && pwd)"
python="$root/.venv/bin/python"
[ -x "$python" ] || python="$(command -v python3)"
[ -n "$python" ] || { echo "SKIPPED: no python3"; exit 77; }
cd "$(dirname "$0")" && exec "$python" "$@"
