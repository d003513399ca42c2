#!/usr/bin/env bash
# Starts a 3-head MegaFlow cluster on loopback, submits a rollout graph,
# kills the leader with SIGKILL, shows a new leader take over with every
# acknowledged graph intact, restarts the killed head, and stops everything.
# Data goes under ${MEGAFLOW_RUN_DIR:-/tmp/megaflow-run}.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${MEGAFLOW_RUN_DIR:-/tmp/megaflow-run}
rm -rf "$dir"; mkdir -p "$dir"
export MEGAFLOW_HEADS=127.0.0.1:17071,127.0.0.1:17072,127.0.0.1:17073
pids=()
start_head() {
  local i=$1
  bin/megaflow-head --node-id h$i --data-dir "$dir/h$i" \
    --raft-addr 127.0.0.1:1700$i --grpc-addr 127.0.0.1:1707$i --gossip-addr 127.0.0.1:1794$i \
    --bootstrap-expect 3 --join 127.0.0.1:17941,127.0.0.1:17942 >>"$dir/h$i.log" 2>&1 &
  pids[$i]=$!
}
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "starting 3 heads (logs in $dir/h*.log)"
for i in 1 2 3; do start_head $i; done
for _ in $(seq 1 100); do
  bin/megaflow cluster --timeout 2s >/dev/null 2>&1 && bin/megaflow cluster --timeout 2s | grep -q '^leader h' && break
  sleep 0.2
done
bin/megaflow cluster

step "submitting examples/rollout-step.yaml"
bin/megaflow submit examples/rollout-step.yaml
bin/megaflow tasks rollout-step-1

leader=$(bin/megaflow cluster -o json | sed -n 's/.*"leader_id": *"\(h[0-9]\)".*/\1/p')
step "kill -9 of the leader $leader"
kill -9 "${pids[${leader#h}]}"; wait "${pids[${leader#h}]}" 2>/dev/null || true
for i in $(seq 1 50); do
  bin/megaflow submit --id "after-kill-$i" examples/rollout-step.yaml --timeout 20s >/dev/null && break
done
for _ in $(seq 1 50); do bin/megaflow cluster | grep -q "^$leader .* dead" && break; sleep 0.2; done
bin/megaflow cluster
step "every graph is still there, on the new leader"
bin/megaflow graphs

step "restarting $leader on its data dir: it rejoins and catches up"
start_head "${leader#h}"
for _ in $(seq 1 100); do
  bin/megaflow status rollout-step-1 --stale --heads "127.0.0.1:1707${leader#h}" --timeout 2s >/dev/null 2>&1 && break
  sleep 0.2
done
bin/megaflow status rollout-step-1 --stale --heads "127.0.0.1:1707${leader#h}"
bin/megaflow cluster
step "done; stopping the cluster"
