#!/usr/bin/env bash
# Builds the demo's environment images locally, FROM scratch (no registry):
# one per source repository of the SWE-Gym instances,
# megaflow/swegym-<name>:demo, each holding our static megaflow-agent,
# megaflow-model and megaflow-sh (a Go shell and core tools: sh for the
# agent's tool commands and the warm container's idle process, ls, find,
# grep, head, wc, cat, sleep...) and the repository's name. Nothing is
# pulled and nothing comes from a distribution package: a host with Go and
# a Docker Engine builds them.
# Usage: scripts/build-demo-images.sh [BIN_DIR]  (default bin/, from `make build`)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-bin}
for p in megaflow-agent megaflow-model megaflow-sh; do
  [ -x "$bin/$p" ] || { echo "missing $bin/$p: run make build first" >&2; exit 1; }
done
if [[ "$(ldd "$bin/megaflow-sh" 2>&1 || true)" != *"not a dynamic executable"* ]]; then
  echo "$bin/megaflow-sh is not static: build it with CGO_ENABLED=0 (make build does)" >&2
  exit 1
fi
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 || { echo "no Docker Engine answers: start it, or run the demo with --runtime process" >&2; exit 1; }
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin" "$ctx/work"
cp "$bin/megaflow-agent" "$bin/megaflow-model" "$bin/megaflow-sh" "$ctx/bin/"
for a in $("$bin/megaflow-sh" --list); do ln -s megaflow-sh "$ctx/bin/$a"; done
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
