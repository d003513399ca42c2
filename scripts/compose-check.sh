#!/usr/bin/env bash
# make compose-check: deploy/compose/docker-compose.yml end to end. Brings up
# 3 heads and COMPOSE_CHECK_WORKERS workers (default 3, by --scale; images
# from `make images`) as project megaflow-check, waits for a leader and every
# worker (each named by its container's hostname), runs a graph that also
# puts one task on each worker (a gang), kills the leader's container and
# one worker's, starts that worker's container again, waits for a new leader
# and for that worker under the same id, runs a second such graph, then
# tears everything down (always, from a trap) and checks that no container,
# network or volume of the project (anonymous ones included) is left. Exits
# non-zero on any failure; the whole run is bounded by COMPOSE_CHECK_TIMEOUT
# seconds (default 300). Compose is docker-compose (v1, or v2 standalone)
# or, without it, `docker compose` (v2); COMPOSE_CHECK_COMPOSE="docker
# compose" picks one. The CLI is $MEGAFLOW_CLI (default bin/megaflow).
# Ports: free ones on 127.0.0.1 unless MEGAFLOW_GRPC_PORT{,2,3} are set. Two
# runs at once on one host need another COMPOSE_CHECK_PROJECT and
# MEGAFLOW_SUBNET (three octets).
set -euo pipefail
cd "$(dirname "$0")/.."
project=${COMPOSE_CHECK_PROJECT:-megaflow-check}
file=deploy/compose/docker-compose.yml
graph=deploy/compose/check-graph.yaml
cli=${MEGAFLOW_CLI:-bin/megaflow}
budget=${COMPOSE_CHECK_TIMEOUT:-300}
workers=${COMPOSE_CHECK_WORKERS:-3}
start=$(date +%s)
if [ -n "${COMPOSE_CHECK_COMPOSE:-}" ]; then read -ra compose <<<"$COMPOSE_CHECK_COMPOSE"
elif command -v docker-compose >/dev/null; then compose=(docker-compose)
elif docker compose version >/dev/null 2>&1; then compose=(docker compose)
else echo "FAIL: neither docker-compose nor docker compose runs" >&2; exit 1; fi
dc() { "${compose[@]}" -p "$project" -f "$file" "$@"; }
say() { printf '[%3ds] %s\n' "$(( $(date +%s) - start ))" "$*"; }
fail() { say "FAIL: $*" >&2; exit 1; }
left() { # seconds of the overall budget left (at least 1)
  local l=$(( budget - ($(date +%s) - start) )); [ "$l" -gt 0 ] || fail "over the ${budget}s budget"; echo "$l"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export MEGAFLOW_GRPC_PORT=${MEGAFLOW_GRPC_PORT:-$(free_port)}
export MEGAFLOW_GRPC_PORT2=${MEGAFLOW_GRPC_PORT2:-$(free_port)}
export MEGAFLOW_GRPC_PORT3=${MEGAFLOW_GRPC_PORT3:-$(free_port)}
export MEGAFLOW_HEADS=127.0.0.1:$MEGAFLOW_GRPC_PORT,127.0.0.1:$MEGAFLOW_GRPC_PORT2,127.0.0.1:$MEGAFLOW_GRPC_PORT3
[[ "$workers" =~ ^[1-9][0-9]?$ ]] || fail "COMPOSE_CHECK_WORKERS=$workers: want 1 to 99"
[ -x "$cli" ] || fail "no CLI at $cli (make images builds bin/static/megaflow)"
for i in megaflow-head megaflow-worker; do
  docker image inspect "$i:${MEGAFLOW_IMAGE_TAG:-dev}" >/dev/null 2>&1 || fail "no image $i:${MEGAFLOW_IMAGE_TAG:-dev}: run make images"
done

graph_file=$(mktemp)
teardown() {
  local rc=$?
  trap - EXIT INT TERM
  rm -f "$graph_file"
  if [ "$rc" != 0 ]; then
    say "logs of the failed run (last 15 lines each):" >&2
    dc logs --no-color --tail 15 >&2 2>&1 || true
  fi
  # The containers' anonymous volumes (the workers' data) carry no
  # project label: note them to check that down -v removed them too.
  local c n v anon
  c=$(docker ps -aq --filter "label=com.docker.compose.project=$project")
  anon=$( [ -z "$c" ] || docker inspect -f '{{range .Mounts}}{{if eq .Type "volume"}}{{.Name}}{{"\n"}}{{end}}{{end}}' $c 2>/dev/null | sort -u || true)
  timeout 60 "${compose[@]}" -p "$project" -f "$file" down -v --remove-orphans -t 5 >/dev/null 2>&1 || say "compose down failed" >&2
  c=$(docker ps -aq --filter "label=com.docker.compose.project=$project")
  n=$(docker network ls -q --filter "label=com.docker.compose.project=$project")
  v=$(docker volume ls -q --filter "label=com.docker.compose.project=$project")
  for a in $anon; do docker volume inspect "$a" >/dev/null 2>&1 && v="$v $a"; done
  if [ -n "$c$n$v" ]; then
    say "FAIL: left after down: containers [$c] networks [$n] volumes [$v]" >&2
    rc=1
  else
    say "torn down: no container, network or volume of $project left ($(wc -w <<<"$anon") volumes removed)"
  fi
  [ "$rc" = 0 ] && say "PASS in $(( $(date +%s) - start ))s" || say "FAILED (exit $rc) after $(( $(date +%s) - start ))s" >&2
  exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT TERM

# Waits until "$@" succeeds, for at most $1 seconds (and the budget).
wait_for() {
  local secs=$1 what=$2; shift 2
  local until=$(( $(date +%s) + secs ))
  until "$@" >/dev/null 2>&1; do
    left >/dev/null
    [ "$(date +%s)" -lt "$until" ] || fail "timed out after ${secs}s waiting for $what"
    sleep 1
  done
}
leader() { "$cli" cluster -o json --timeout 3s 2>/dev/null | sed -n 's/.*"leader_id": *"\(h[0-9]\)".*/\1/p'; }
has_leader() { [ -n "$(leader)" ]; }
new_leader() { local l; l=$(leader); [ -n "$l" ] && [ "$l" != "$1" ]; }
# The workers the leader lists, "id status" a line, sorted.
worker_rows() { "$cli" workers --timeout 3s 2>/dev/null | awk 'NR > 1 {print $1, $2}' | sort; }
# The containers of a service (docker ps: much faster than compose ps),
# by their short ids: a worker's is its hostname, so its worker id.
service_containers() { docker ps -q --filter "label=com.docker.compose.project=$project" --filter "label=com.docker.compose.service=$1"; }
container_ids() { service_containers worker | sort; }
# Every worker container is an alive worker of its hostname's id, and the
# leader lists no other worker.
workers_are_containers() {
  local want; want=$(container_ids)
  [ "$(wc -l <<<"$want")" = "$workers" ] && [ "$(worker_rows)" = "$(sed 's/$/ alive/' <<<"$want")" ]
}
# check-graph.yaml and a gang of one task per worker (a gang puts each of
# its tasks on a worker of its own: docs/placement.md), appended to its
# task list.
{ cat "$graph"; for ((i = 0; i < workers; i++)); do
  printf '  - {name: on-worker-%d, gang: every-worker, image: megaflow-worker:dev, command: [sh, -c, "echo one task on each worker"], depends_on: [setup], resources: {cpu_millis: 100, memory_bytes: 32Mi}}\n' "$i"
done; } >"$graph_file"
run_graph() { # id
  timeout "$(left)" "$cli" submit "$graph_file" --id "$1" --wait --timeout 90s || fail "graph $1 did not succeed (exit $?)"
  # The gang's tasks ran on every worker, one each.
  local ran; ran=$("$cli" tasks "$1" --timeout 10s | awk '$1 ~ /on-worker-/ {print $4}' | sort)
  [ "$ran" = "$(container_ids)" ] || fail "graph $1's gang ran on [$(echo $ran)], not on each worker [$(echo $(container_ids))]"
  say "graph $1 succeeded; its gang ran on every worker: $(echo $ran)"
}

say "${compose[*]} -p $project up -d --scale worker=$workers (heads on 127.0.0.1:$MEGAFLOW_GRPC_PORT,$MEGAFLOW_GRPC_PORT2,$MEGAFLOW_GRPC_PORT3)"
timeout "$(left)" "${compose[@]}" -p "$project" -f "$file" up -d --scale worker="$workers" >/dev/null 2>&1 || fail "compose up"
wait_for 60 "a leader" has_leader
wait_for 60 "$workers alive workers named by their containers' hostnames" workers_are_containers
"$cli" cluster
"$cli" workers
l1=$(leader)
say "leader $l1; submitting graph check-1"
run_graph check-1
w1=$(container_ids | head -n 1)
say "docker kill of the leader's container ($l1) and of worker $w1's, then docker start of that worker's"
docker kill "$(service_containers "$l1")" "$w1" >/dev/null || fail "docker kill $l1 and worker $w1"
docker start "$w1" >/dev/null || fail "docker start of worker $w1"
wait_for 60 "a new leader" new_leader "$l1"
wait_for 60 "worker $w1 back under its id, beside the others" workers_are_containers
kept_id() { docker logs "$w1" 2>&1 | grep -q 'using the worker id from the data dir'; }
wait_for 30 "the restarted worker $w1 to take the id kept in its data dir" kept_id
"$cli" cluster
say "new leader $(leader); submitting graph check-2"
run_graph check-2
"$cli" tasks check-2
out=$("$cli" logs check-2/setup --timeout 10s 2>&1) && [[ "$out" == *preparing* ]] ||
  fail "logs of check-2/setup from the shared artifact volume: $out"
say "logs of check-2/setup read back: $out"
say "both graphs succeeded; tearing down"
