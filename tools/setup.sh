#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine for Corolla and builds it in Release under build/.
#   bash tools/setup.sh            install what is missing, configure, build
#   SETUP_SKIP_BUILD=1 bash ...    install only
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config git python3
  libcaf-dev capnproto libcapnp-dev librocksdb-dev libtomlplusplus-dev
  libboost-test-dev libboost-dev
  libopenblas-pthread-dev libdnnl-dev libpcre2-dev libicu-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev
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

[ "${SETUP_SKIP_BUILD:-0}" = 1 ] && exit 0
jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
