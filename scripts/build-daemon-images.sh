#!/usr/bin/env bash
# Builds the daemon images FROM scratch (no registry needed) from static
# binaries (CGO_ENABLED=0: the worker's no-NVML build, cmd/megaflow-worker/
# gpus_none.go, so it offers no GPUs):
#   megaflow-head:<version>    /bin/megaflow-head
#   megaflow-worker:<version>  /bin/megaflow-worker, /bin/megaflow-init next to
#                              it, and megaflow-sh linked as sh and its tools
#                              (tasks of the process runtime run in the
#                              worker's container and need a shell)
# each also tagged :dev. Usage: build-daemon-images.sh BIN_DIR VERSION
set -euo pipefail
bin=${1:?usage: build-daemon-images.sh BIN_DIR VERSION}
version=${2:?usage: build-daemon-images.sh BIN_DIR VERSION}
# A Docker tag allows [A-Za-z0-9_.-] only.
tag=$(printf '%s' "$version" | tr -c 'A-Za-z0-9_.-' '-')
for p in megaflow-head megaflow-worker megaflow-init megaflow-sh; do
  if [[ "$(ldd "$bin/$p" 2>&1 || true)" != *"not a dynamic executable"* ]]; then
    echo "$bin/$p is not static: build it with CGO_ENABLED=0 (make images does)" >&2
    exit 1
  fi
done
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
build() { # name, then the context is $ctx/$name
  local name=$1 out
  out=$(docker build -q -t "$name:$tag" -t "$name:dev" \
    --label org.megaflow.version="$version" "$ctx/$name" 2>&1) || { echo "$out" >&2; exit 1; }
  echo "built $name:$tag and $name:dev"
}

mkdir -p "$ctx/megaflow-head/bin" "$ctx/megaflow-head/tmp"; chmod 1777 "$ctx/megaflow-head/tmp"
cp "$bin/megaflow-head" "$ctx/megaflow-head/bin/"
cat > "$ctx/megaflow-head/Dockerfile" <<'DF'
FROM scratch
COPY bin /bin
COPY tmp /tmp
ENV PATH=/bin
VOLUME /var/lib/megaflow
EXPOSE 7000 7070 7946 7946/udp 9090
ENTRYPOINT ["/bin/megaflow-head"]
DF
build megaflow-head

mkdir -p "$ctx/megaflow-worker/bin" "$ctx/megaflow-worker/tmp"; chmod 1777 "$ctx/megaflow-worker/tmp"
cp "$bin/megaflow-worker" "$bin/megaflow-init" "$bin/megaflow-sh" "$ctx/megaflow-worker/bin/"
for a in $("$bin/megaflow-sh" --list); do
  [ -e "$ctx/megaflow-worker/bin/$a" ] || ln -s megaflow-sh "$ctx/megaflow-worker/bin/$a"
done
cat > "$ctx/megaflow-worker/Dockerfile" <<'DF'
FROM scratch
COPY bin /bin
COPY tmp /tmp
ENV PATH=/bin TMPDIR=/tmp
VOLUME /var/lib/megaflow
EXPOSE 7947 7947/udp 9091
ENTRYPOINT ["/bin/megaflow-worker"]
DF
build megaflow-worker
