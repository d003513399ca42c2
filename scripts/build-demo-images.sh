#!/usr/bin/env bash
# Builds the demo's environment images locally, FROM scratch (no registry):
# one per source repository of the SWE-Gym instances,
# megaflow/swegym-<name>:demo, each holding our static megaflow-agent and
# megaflow-model, Debian's static busybox (the agent's shell tools and the
# warm container's idle process) and the repository's name.
# Usage: scripts/build-demo-images.sh [BIN_DIR]  (default bin/, from `make build`)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-bin}
for p in megaflow-agent megaflow-model; do
  [ -x "$bin/$p" ] || { echo "missing $bin/$p: run make build first" >&2; exit 1; }
done
bb=$(command -v busybox || true)
[ -x /bin/busybox ] && bb=/bin/busybox
if [ -z "$bb" ] || [[ "$(ldd "$bb" 2>&1 || true)" != *"not a dynamic executable"* ]]; then
  echo "needs a static busybox: apt-get install busybox-static" >&2
  exit 1
fi
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || { echo "no Docker Engine answers: start it, or run the demo with --runtime process" >&2; exit 1; }
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin" "$ctx/work"
cp "$bb" "$ctx/bin/busybox"
for a in $("$bb" --list); do [ "$a" = busybox ] || ln -s busybox "$ctx/bin/$a"; done
cp "$bin/megaflow-agent" "$bin/megaflow-model" "$ctx/bin/"
# The repositories of the SWE-Gym training instances (examples/demo/data).
repos=$(sed -n 's/^ *"\([^"]*\)__\([^"]*\)-[0-9]*": *[0-9]*,\{0,1\}$/\1\/\2/p' examples/demo/data/resource_factor_SWE-Gym_train.json | awk '!seen[$0]++')
printf 'FROM scratch\nCOPY bin /bin\nCOPY work /work\nENV PATH=/bin\nWORKDIR /work\n' > "$ctx/Dockerfile"
out=$(docker build -q -t megaflow/swegym-base:demo "$ctx" 2>&1) || { echo "$out" >&2; exit 1; }
# One image per repository on top: same layers, own name and config.
n=0
for repo in $repos; do
  name=$(echo "${repo#*/}" | tr 'A-Z' 'a-z')
  printf 'FROM megaflow/swegym-base:demo\nENV SWEGYM_REPO=%s\nLABEL org.megaflow.demo.repo=%s\n' "$repo" "$repo" |
    docker build -q -t "megaflow/swegym-$name:demo" - >/dev/null 2>"$ctx/err" || { cat "$ctx/err" >&2; exit 1; }
  n=$((n + 1))
done
echo "built $n demo images megaflow/swegym-<repo>:demo ($(echo $repos | tr ' ' ','))"
