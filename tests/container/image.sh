#!/usr/bin/env bash
# The container image (Dockerfile): built on a Debian 12 base made here with debootstrap from Debian's packages
# (no registry needed), then `corolla run --prompt` in it answers with the demo model; with podman-compose, the
# private swarm of compose.yaml (a DHT node, two servers, the API, on a network of their own where they find each
# other by service name) answers a chat completion on a loopback port. Skipped (77) with the reason where
# containers cannot run: no podman, no debootstrap, no demo model, or a runtime that cannot start one. Takes about
# as long as a build of the project (the image compiles it). Everything started is removed at the end.
#   tests/container/image.sh [REPO_ROOT]
set -u
root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
skip() { echo "SKIPPED: $*"; exit 77; }
command -v podman >/dev/null || skip "podman is not installed (apt-get install podman)"
demo="${COROLLA_CACHE:-$HOME/.cache/corolla}/demo/SmolLM2-135M-Instruct.Q4_1.gguf"
[ -f "$demo" ] || skip "the demo model is not downloaded ($demo; bash tools/fetch_demo_model.sh)"
work=$(mktemp -d)
tag="localhost/corolla-test:$$"
project="corolla-test-$$"
cleanup() {
  [ -f "$work/compose.yaml" ] && podman-compose -p "$project" -f "$work/compose.yaml" down >/dev/null 2>&1
  podman volume rm -f "${project}_cache" >/dev/null 2>&1
  podman rmi -f "$tag" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

# Some hosts (containers in containers) refuse podman's default rlimits and crun's cgroup handling: fall back to
# no default rlimits and runc when the plain form cannot start a container.
podman_args=()
can_run() { podman "${podman_args[@]}" run --rm --network host "$1" true >"$work/run.log" 2>&1; }
base=localhost/debian:12
if ! podman image exists "$base"; then
  command -v debootstrap >/dev/null || skip "no $base image and no debootstrap to make one (apt-get install debootstrap)"
  debootstrap --variant=minbase bookworm "$work/rootfs" >"$work/debootstrap.log" 2>&1 ||
    skip "debootstrap could not make a Debian 12 base: $(tail -1 "$work/debootstrap.log")"
  tar -C "$work/rootfs" -c . | podman import - "$base" >/dev/null || skip "podman cannot import an image"
  rm -rf "$work/rootfs"
fi
if ! can_run "$base"; then
  { printf '[containers]\ndefault_ulimits = []\n'
    command -v runc >/dev/null && printf '[engine]\nruntime = "runc"\n'
    command -v netavark >/dev/null || [ -x /usr/lib/podman/netavark ] && printf '[network]\nnetwork_backend = "netavark"\n'
  } > "$work/containers.conf"
  export CONTAINERS_CONF="$work/containers.conf"
  can_run "$base" || skip "podman cannot start a container here: $(tail -1 "$work/run.log")"
fi

podman "${podman_args[@]}" build --network host --build-arg BASE="$base" -t "$tag" "$root" >"$work/build.log" 2>&1 ||
  { tail -30 "$work/build.log"; echo "FAILED: the image does not build"; exit 1; }
out=$(podman "${podman_args[@]}" run --rm --network host -v "$(dirname "$demo"):/root/.cache/corolla/demo:ro" "$tag" \
      run --prompt "Name the capital of France." --max-new-tokens 16 2>&1)
echo "$out" | tail -5
[[ "$out" == *Paris* ]] && echo "ok: corolla run --prompt in the image answers" || { echo "FAILED: no answer"; exit 1; }

command -v podman-compose >/dev/null || skip "(the image passed) podman-compose is not installed to run compose.yaml"
# compose.yaml as it is, but with the image just built and a free loopback port for the API.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -e "s|^    build: \.$||" -e "s|image: corolla$|image: $tag|" -e "s|127.0.0.1:8080:8080|127.0.0.1:$port:8080|" \
  "$root/compose.yaml" > "$work/compose.yaml"
podman volume create "${project}_cache" >/dev/null
volume=$(podman volume inspect "${project}_cache" --format '{{.Mountpoint}}')
mkdir -p "$volume/corolla/demo" && cp "$demo" "$volume/corolla/demo/"  # the image may lack it (no PyPI at build)
podman-compose -p "$project" -f "$work/compose.yaml" up -d >"$work/compose.log" 2>&1 ||
  { tail -20 "$work/compose.log"; echo "FAILED: compose up"; exit 1; }
answer=$(python3 - "$port" <<'PY'
import json, sys, time, urllib.request
body = json.dumps({"model": "demo", "max_tokens": 16, "temperature": 0,
                   "messages": [{"role": "user", "content": "Name the capital of France."}]}).encode()
deadline = time.time() + 180
while time.time() < deadline:
    try:
        req = urllib.request.Request("http://127.0.0.1:%s/v1/chat/completions" % sys.argv[1], body,
                                     {"Content-Type": "application/json"})
        print(json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["message"]["content"])
        break
    except Exception as e:  # the servers are still starting, or not all blocks are served yet
        last = e
        time.sleep(1)
else:
    print("no answer: %s" % last)
PY
)
echo "compose: $answer"
[[ "$answer" == *Paris* ]] && echo "ok: compose.yaml's swarm answers through its API" ||
  { podman-compose -p "$project" -f "$work/compose.yaml" logs 2>&1 | tail -20; echo "FAILED: compose"; exit 1; }
