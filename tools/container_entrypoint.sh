#!/bin/sh
# The container's entry point (Dockerfile): the demo model that ships in the image is linked into the cache (a
# volume, empty at first) unless the cache holds one, then corolla runs with the container's arguments.
set -e
cache="${COROLLA_CACHE:-$HOME/.cache/corolla}"
model=SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -e "$cache/demo/$model" ] && [ -e "/usr/local/share/corolla/demo/$model" ]; then
  mkdir -p "$cache/demo"
  ln -sf "/usr/local/share/corolla/demo/$model" "$cache/demo/$model"
fi
exec corolla "$@"
