#!/usr/bin/env bash
# Formats the project's C++ and CUDA sources with .clang-format (clang-format 14, Debian 12's `clang-format`).
#   bash tools/format.sh           rewrite every tracked source in place
#   bash tools/format.sh --check   list the files that differ and exit 1 if any does (the `format` test); exits 77
#                                  ("skipped") where clang-format 14 is absent: other versions lay code out otherwise
set -euo pipefail
cd "$(dirname "$0")/.."
tool=""
for candidate in clang-format-14 clang-format; do
  if command -v "$candidate" >/dev/null && "$candidate" --version | grep -q "version 14\."; then
    tool=$candidate
    break
  fi
done
if [ -z "$tool" ]; then
  echo "format: clang-format 14 not found (Debian 12: apt install clang-format)" >&2
  exit 77
fi
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h')
if [ "${1:-}" = "--check" ]; then
  differing=()
  for f in "${files[@]}"; do
    "$tool" --style=file "$f" | cmp -s - "$f" || differing+=("$f")
  done
  if ((${#differing[@]})); then
    printf 'format: not formatted (bash tools/format.sh): %s\n' "${differing[@]}" >&2
    exit 1
  fi
  echo "format: ${#files[@]} files formatted"
  exit 0
fi
"$tool" --style=file -i "${files[@]}"
