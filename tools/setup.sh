#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for Corolla and builds it in Release under build/.
#   bash tools/setup.sh            install what is missing, configure, build
#   SETUP_SKIP_BUILD=1 bash ...    install only
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config git python3 python3-pip
  libcaf-dev capnproto libcapnp-dev librocksdb-dev libtomlplusplus-dev
  libboost-test-dev libboost-dev
  libopenblas-pthread-dev libdnnl-dev libpcre2-dev libicu-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libjemalloc-dev libssl-dev libsodium-dev
  pybind11-dev python3-dev python3-numpy python3-pytest
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The demo chat model (SmolLM2-135M-Instruct, Q4_1 GGUF) used by the README's first command and some tests.
# A failed download is not fatal: those tests then report "skipped".
bash tools/fetch_demo_model.sh >/dev/null || echo "setup: the demo model could not be fetched; demo tests will be skipped" >&2

[ "${SETUP_SKIP_BUILD:-0}" = 1 ] && exit 0
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
