#!/usr/bin/env bash
# The main job: a 3-head MegaFlow cluster and 2 workers on loopback. It
# submits a rollout graph, kills the head leader with SIGKILL while the
# graph runs, shows a new leader finish it with no task restarted, restarts
# the killed head (it catches up), and stops everything.
# Data and logs go under ${MEGAFLOW_RUN_DIR:-/tmp/megaflow-run}.
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
    --http-addr 127.0.0.1:1709$i --artifacts "file://$dir/artifacts" --bootstrap-expect 3 --join 127.0.0.1:17941,127.0.0.1:17942 >>"$dir/h$i.log" 2>&1 &
  pids[$i]=$!
}
start_worker() {
  local i=$1
  bin/megaflow-worker --node-id w$i --data-dir "$dir/w$i" --gossip-addr 127.0.0.1:1795$i --http-addr 127.0.0.1:1719$i \
    --artifacts "file://$dir/artifacts" \
    --join 127.0.0.1:17941,127.0.0.1:17942,127.0.0.1:17943 --runtime process \
    --cpu-millis 2000 --memory-bytes 2147483648 >>"$dir/w$i.log" 2>&1 &
  pids[$((10 + i))]=$!
}
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "starting 3 heads and 2 workers (logs in $dir/*.log)"
for i in 1 2 3; do start_head $i; done
for i in 1 2; do start_worker $i; done
for _ in $(seq 1 100); do
  bin/megaflow cluster --timeout 2s 2>/dev/null | grep -q '^leader h' && break
  sleep 0.2
done
bin/megaflow cluster
for _ in $(seq 1 100); do
  [ "$(bin/megaflow workers --timeout 2s 2>/dev/null | grep -c ' alive ')" = 2 ] && break
  sleep 0.2
done
echo "(the workers use the process runtime: tasks run as plain processes, no Docker needed)"
bin/megaflow workers

step "submitting examples/hello-rollouts.yaml: setup -> 8 rollouts -> aggregate"
bin/megaflow submit examples/hello-rollouts.yaml
sleep 2
bin/megaflow tasks hello-rollouts

leader=$(bin/megaflow cluster -o json | sed -n 's/.*"leader_id": *"\(h[0-9]\)".*/\1/p')
step "kill -9 of the leader $leader while the rollouts run"
kill -9 "${pids[${leader#h}]}"; wait "${pids[${leader#h}]}" 2>/dev/null || true
bin/megaflow submit examples/hello-rollouts.yaml --wait
for _ in $(seq 1 50); do bin/megaflow cluster 2>/dev/null | grep -q "^$leader .* dead" && break; sleep 0.2; done
bin/megaflow cluster
step "every task ran once (ATTEMPT 1), through the leader change"
bin/megaflow tasks hello-rollouts
step "the aggregate's log, read back from the shared artifact store"
bin/megaflow logs hello-rollouts/aggregate

step "restarting $leader on its data dir: it rejoins and catches up"
start_head "${leader#h}"
for _ in $(seq 1 100); do
  bin/megaflow status hello-rollouts --stale --heads "127.0.0.1:1707${leader#h}" --timeout 2s 2>/dev/null | grep -q succeeded && break
  sleep 0.2
done
bin/megaflow status hello-rollouts --stale --heads "127.0.0.1:1707${leader#h}"
step "done; stopping the cluster"
