#!/usr/bin/env bash
# Checks that `make demo` needs nothing but Go and a Docker Engine: the demo
# images are built and a short demo step runs in containers with busybox
# and the C compiler hidden (not on PATH, not in /bin). Run by `make
# demo-bare`.
#
# As root with unshare(1), the check re-runs itself in a private mount
# namespace and binds /dev/null over every busybox and C compiler (gcc, cc,
# clang, c99, c89, the one `go env CC` names) it finds, so nothing in it
# (this script, the build, the image build, the demo) can run one; the rest
# of the machine is untouched. Elsewhere it drops PATH entries holding a
# busybox, points CC at a program that does not exist, and says that /bin
# could not be hidden.
#
# Then it runs `make demo DEMO_ARGS="--instances N"` (DEMO_INSTANCES,
# default 2) with its binaries in BIN_DIR/bare (so BIN_DIR keeps the cgo
# worker of `make build`): the build must say it made the worker without
# cgo, and the demo must pick the docker runtime and succeed. Last it checks
# that the image holds megaflow-sh and no busybox.
# Usage: scripts/check-demo-bare.sh [BIN_DIR]  (default bin/)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-bin}/bare
instances=${DEMO_INSTANCES:-2}
compilers="gcc cc clang c99 c89 $(go env CC 2>/dev/null | cut -d' ' -f1)"

hide() {
  local b c
  for b in /bin/busybox /usr/bin/busybox /sbin/busybox /usr/sbin/busybox /usr/local/bin/busybox $(type -ap busybox); do
    [ -f "$b" ] && mount --bind /dev/null "$b"
  done
  # A link's target is covered: every name of that compiler is hidden.
  for c in $compilers; do
    for b in /bin/$c /usr/bin/$c /usr/local/bin/$c $(type -ap "$c"); do
      [ -f "$b" ] && mount --bind /dev/null "$b"
    done
  done
  return 0
}
if [ "${MEGAFLOW_BARE_NS:-}" = 1 ]; then
  hide
elif [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && unshare -m --propagation private true 2>/dev/null; then
  MEGAFLOW_BARE_NS=1 exec unshare -m --propagation private "$0" "$@"
else
  echo "note: not root or no unshare: busybox and the C compiler stay in /bin; dropping busybox from PATH and setting CC=megaflow-no-cc only" >&2
  keep=()
  IFS=: read -ra dirs <<<"$PATH"
  for d in "${dirs[@]}"; do [ -x "$d/busybox" ] || keep+=("$d"); done
  PATH=$(IFS=:; echo "${keep[*]}")
  export CC=megaflow-no-cc
  compilers=megaflow-no-cc
fi
IFS=: read -ra dirs <<<"$PATH:/bin:/usr/bin"
for d in "${dirs[@]}"; do
  if [ -f "$d/busybox" ] && [ -x "$d/busybox" ]; then
    echo "FAIL: busybox is still visible at $d/busybox" >&2
    exit 1
  fi
done
if busybox true 2>/dev/null; then echo "FAIL: busybox still runs" >&2; exit 1; fi
for c in $compilers; do
  if "$c" --version >/dev/null 2>&1; then echo "FAIL: the C compiler $c still runs" >&2; exit 1; fi
done
echo "busybox hidden: not on PATH, not in /bin; no C compiler ($compilers) runs"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
make --no-print-directory demo BIN="$bin" DEMO_ARGS="--instances $instances" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
set -e
grep -q '^note: no working C compiler' "$out" || { echo "FAIL: make build did not say it built the worker without cgo" >&2; exit 1; }
grep -q '^runtime: docker ' "$out" || { echo "FAIL: the demo did not pick the docker runtime" >&2; exit 1; }
[ "$rc" = 0 ] || { echo "FAIL: make demo exited $rc" >&2; exit 1; }
go version -m "$bin/megaflow-worker" | grep -q 'CGO_ENABLED=0' || { echo "FAIL: $bin/megaflow-worker was built with cgo" >&2; exit 1; }

# The image's files: megaflow-sh and its links, no busybox.
name=megaflow-bare-check-$$
docker create --name "$name" megaflow/swegym-base:demo /bin/true >/dev/null
trap 'rm -f "$out"; docker rm -f "$name" >/dev/null 2>&1 || true' EXIT
files=$(docker export "$name" | tar -t)
for want in bin/megaflow-sh bin/sh bin/sleep bin/megaflow-agent bin/megaflow-model; do
  grep -qx "$want" <<<"$files" || { echo "FAIL: the demo image lacks /$want" >&2; exit 1; }
done
if grep -qi busybox <<<"$files"; then
  echo "FAIL: the demo image holds busybox: $(grep -i busybox <<<"$files" | tr '\n' ' ')" >&2
  exit 1
fi
echo "PASS: make demo ran $instances instances in containers (image megaflow/swegym-base:demo: megaflow-sh, no busybox) with busybox and the C compiler hidden (megaflow-worker built without cgo)"
