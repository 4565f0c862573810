#!/usr/bin/env bash
# What the API's Python tests need beyond tools/setup.sh: Debian's chromium and chromedriver (the chat page test
# drives them headless) and a virtual environment .venv with the official openai package and Selenium; pytest and
# numpy for the Python the client's extension is built for; and clang-format, which the `format` test runs.
# tools/test.sh runs it. Failures are not fatal: the tests that need a missing piece report "skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
packages=(chromium chromium-driver python3-venv clang-format)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null; } || echo "setup: could not install ${missing[*]}; the tests that need them will be skipped" >&2
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv || echo "setup: could not create .venv; the Python API tests will be skipped" >&2
fi
if [ -x .venv/bin/python ] && ! .venv/bin/python -c "import openai, selenium" 2>/dev/null; then
  .venv/bin/python -m pip install -q "openai>=1.0" "selenium>=4.10" ||
    echo "setup: pip could not install openai and selenium; the Python API tests will be skipped" >&2
fi
# The Python client's test runs in the interpreter its extension is built for (CMake's choice, the first python3 on
# PATH: not always Debian's, which has python3-pytest and python3-numpy from tools/setup.sh).
py=$(sed -n 's/^COROLLA_PYTHON_EXECUTABLE:INTERNAL=//p' build/CMakeCache.txt 2>/dev/null)
if [ -n "$py" ] && ! "$py" -c "import pytest, numpy" 2>/dev/null; then
  "$py" -m pip install -q pytest numpy || echo "setup: pip could not install pytest and numpy for $py; python_client will be skipped" >&2
fi
exit 0
