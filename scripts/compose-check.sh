#!/usr/bin/env bash
# make compose-check: deploy/compose/docker-compose.yml end to end. Brings up
# 3 heads and 2 workers (images from `make images`) as project
# megaflow-check, waits for a leader and both workers, runs a graph, kills
# the leader's container, waits for a new leader, runs a second graph, then
# tears everything down (always, from a trap) and checks that no container,
# network or volume of the project is left. Exits non-zero on any failure;
# the whole run is bounded by COMPOSE_CHECK_TIMEOUT seconds (default 300).
# The CLI is $MEGAFLOW_CLI (default bin/megaflow). Ports: free ones on
# 127.0.0.1 unless MEGAFLOW_GRPC_PORT{,2,3} are set. Two runs at once on one
# host need another COMPOSE_CHECK_PROJECT and MEGAFLOW_SUBNET (three octets).
set -euo pipefail
cd "$(dirname "$0")/.."
project=${COMPOSE_CHECK_PROJECT:-megaflow-check}
file=deploy/compose/docker-compose.yml
graph=deploy/compose/check-graph.yaml
cli=${MEGAFLOW_CLI:-bin/megaflow}
budget=${COMPOSE_CHECK_TIMEOUT:-300}
start=$(date +%s)
dc() { docker-compose -p "$project" -f "$file" "$@"; }
say() { printf '[%3ds] %s\n' "$(( $(date +%s) - start ))" "$*"; }
fail() { say "FAIL: $*" >&2; exit 1; }
left() { # seconds of the overall budget left (at least 1)
  local l=$(( budget - ($(date +%s) - start) )); [ "$l" -gt 0 ] || fail "over the ${budget}s budget"; echo "$l"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export MEGAFLOW_GRPC_PORT=${MEGAFLOW_GRPC_PORT:-$(free_port)}
export MEGAFLOW_GRPC_PORT2=${MEGAFLOW_GRPC_PORT2:-$(free_port)}
export MEGAFLOW_GRPC_PORT3=${MEGAFLOW_GRPC_PORT3:-$(free_port)}
export MEGAFLOW_HEADS=127.0.0.1:$MEGAFLOW_GRPC_PORT,127.0.0.1:$MEGAFLOW_GRPC_PORT2,127.0.0.1:$MEGAFLOW_GRPC_PORT3
[ -x "$cli" ] || fail "no CLI at $cli (make images builds bin/static/megaflow)"
for i in megaflow-head megaflow-worker; do
  docker image inspect "$i:${MEGAFLOW_IMAGE_TAG:-dev}" >/dev/null 2>&1 || fail "no image $i:${MEGAFLOW_IMAGE_TAG:-dev}: run make images"
done

teardown() {
  local rc=$?
  trap - EXIT INT TERM
  if [ "$rc" != 0 ]; then
    say "logs of the failed run (last 15 lines each):" >&2
    dc logs --no-color --tail 15 >&2 2>&1 || true
  fi
  timeout 60 docker-compose -p "$project" -f "$file" down -v --remove-orphans -t 5 >/dev/null 2>&1 || say "docker-compose down failed" >&2
  local c n v
  c=$(docker ps -aq --filter "label=com.docker.compose.project=$project")
  n=$(docker network ls -q --filter "label=com.docker.compose.project=$project")
  v=$(docker volume ls -q --filter "label=com.docker.compose.project=$project")
  if [ -n "$c$n$v" ]; then
    say "FAIL: left after down: containers [$c] networks [$n] volumes [$v]" >&2
    rc=1
  else
    say "torn down: no container, network or volume of $project left"
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
workers_alive() { [ "$("$cli" workers --timeout 3s 2>/dev/null | grep -c ' alive ')" = 2 ]; }
run_graph() { # id
  timeout "$(left)" "$cli" submit "$graph" --id "$1" --wait --timeout 90s || fail "graph $1 did not succeed (exit $?)"
}

say "docker-compose -p $project up -d (heads on 127.0.0.1:$MEGAFLOW_GRPC_PORT,$MEGAFLOW_GRPC_PORT2,$MEGAFLOW_GRPC_PORT3)"
timeout "$(left)" docker-compose -p "$project" -f "$file" up -d >/dev/null 2>&1 || fail "docker-compose up"
wait_for 60 "a leader" has_leader
wait_for 60 "2 alive workers" workers_alive
"$cli" cluster
l1=$(leader)
say "leader $l1; submitting graph check-1"
run_graph check-1
say "docker kill of the leader's container ($l1)"
docker kill "$(dc ps -q "$l1")" >/dev/null || fail "docker kill $l1"
wait_for 60 "a new leader" new_leader "$l1"
"$cli" cluster
say "new leader $(leader); submitting graph check-2"
run_graph check-2
"$cli" tasks check-2
out=$("$cli" logs check-2/setup --timeout 10s 2>&1) && [[ "$out" == *preparing* ]] ||
  fail "logs of check-2/setup from the shared artifact volume: $out"
say "logs of check-2/setup read back: $out"
say "both graphs succeeded; tearing down"
