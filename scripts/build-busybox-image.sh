#!/usr/bin/env bash
# Builds the image the examples use, megaflow/busybox:test, FROM scratch with
# Debian's static busybox (apt-get install busybox-static): no registry needed.
set -euo pipefail
tag=${1:-megaflow/busybox:test}
bb=$(command -v busybox || true)
[ -x /bin/busybox ] && bb=/bin/busybox
if [ -z "$bb" ] || [[ "$(ldd "$bb" 2>&1 || true)" != *"not a dynamic executable"* ]]; then
  echo "needs a static busybox: apt-get install busybox-static" >&2
  exit 1
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/bin"
cp "$bb" "$ctx/bin/busybox"
for a in $("$bb" --list); do [ "$a" = busybox ] || ln -s busybox "$ctx/bin/$a"; done
printf 'FROM scratch\nCOPY bin /bin\nENV PATH=/bin\n' > "$ctx/Dockerfile"
out=$(docker build -q -t "$tag" "$ctx" 2>&1) || { echo "$out" >&2; exit 1; }
echo "built $tag"
