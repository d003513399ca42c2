#!/usr/bin/env bash
# Checks, with real processes and the real Docker Engine, that a Docker
# worker killed -9 under running tasks and restarted on its data dir loses
# nothing (issue 18, findings 2 and 3): one megaflow-head, one
# megaflow-worker --runtime docker, 10 tasks printing 150 lines over 15 s
# then 300 KB and a result, and one printing 8 MB then a result. The worker
# is killed -9 once all 11 run and restarted 5 s later. Every task must end
# SUCCEEDED at its first attempt with its result, and every log read back
# with `megaflow logs` must equal what the task printed, byte for byte.
# Needs the test image megaflow-test/busybox:1 (built by the Docker tests).
# Usage: scripts/check-docker-worker-restart.sh [BIN_DIR]  (default: built
# here from ./cmd into a temporary directory)
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
bin=${1:-$tmp/bin}
if [ -z "${1:-}" ]; then
	go build -o "$bin/" ./cmd/megaflow ./cmd/megaflow-head ./cmd/megaflow-worker ./cmd/megaflow-init
fi
port=$((20000 + RANDOM % 20000))
cluster=mfcheck$port
export MEGAFLOW_HEADS=127.0.0.1:$port
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	docker ps -aq --filter "label=megaflow.cluster=$cluster" | xargs -r docker rm -f >/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
"$bin/megaflow-head" --node-id h1 --bootstrap-expect 1 --data-dir "$tmp/head" --grpc-addr "127.0.0.1:$port" \
	--raft-addr "127.0.0.1:$((port + 1))" --gossip-addr "127.0.0.1:$((port + 2))" --http-addr "" \
	--artifacts "file://$tmp/art" >"$tmp/head.log" 2>&1 &
pids+=($!)
start_worker() {
	"$bin/megaflow-worker" --node-id w1 --runtime docker --cluster-name "$cluster" --data-dir "$tmp/worker" \
		--join "127.0.0.1:$((port + 2))" --gossip-addr "127.0.0.1:$((port + 3))" --http-addr "" \
		--artifacts "file://$tmp/art" --heads "127.0.0.1:$port" >>"$tmp/worker.log" 2>&1 &
	worker=$!
	pids+=($worker)
}
start_worker
{
	echo "id: crash"
	echo "tasks:"
	for i in $(seq 0 9); do
		cat <<T
  - name: t$i
    image: megaflow-test/busybox:1
    command: [sh, -c, "i=0; while [ \$i -lt 150 ]; do echo \"t$i line \$i\"; i=\$((i+1)); sleep 0.1; done; head -c 225000 /dev/zero | base64 -w 100; echo MEGAFLOW_RESULT '{\"task\": $i}'"]
    resources: {cpu_millis: 10, memory_bytes: 16Mi}
T
	done
	cat <<T
  - name: big
    image: megaflow-test/busybox:1
    command: [sh, -c, "sleep 8; head -c 6000000 /dev/zero | base64 -w 100; echo MEGAFLOW_RESULT '{\"task\": \"big\"}'"]
    resources: {cpu_millis: 10, memory_bytes: 16Mi}
T
} >"$tmp/graph.yaml"
for _ in $(seq 60); do "$bin/megaflow" submit "$tmp/graph.yaml" >/dev/null 2>&1 && break; sleep 1; done
running=0
for _ in $(seq 90); do
	running=$("$bin/megaflow" status crash -o json 2>/dev/null | grep -o '"running": *[0-9]*' | grep -o '[0-9]*$' || true)
	[ "${running:-0}" = 11 ] && break
	sleep 1
done
[ "${running:-0}" = 11 ] || { echo "FAIL: ${running:-0} of 11 tasks running after 90 s" >&2; exit 1; }
sleep 3
kill -9 "$worker"
echo "worker killed -9 under 11 running tasks; restarting it in 5 s"
sleep 5
start_worker
"$bin/megaflow" submit "$tmp/graph.yaml" --id crash --wait --timeout 180s | tail -3
"$bin/megaflow" tasks crash -o json >"$tmp/tasks.json"
fail=0
for name in t0 t1 t2 t3 t4 t5 t6 t7 t8 t9 big; do
	if [ "$name" = big ]; then
		{ head -c 6000000 /dev/zero | base64 -w 100; echo 'MEGAFLOW_RESULT {"task": "big"}'; } >"$tmp/want"
	else
		{ for j in $(seq 0 149); do echo "$name line $j"; done
		  head -c 225000 /dev/zero | base64 -w 100; echo "MEGAFLOW_RESULT {\"task\": ${name#t}}"; } >"$tmp/want"
	fi
	"$bin/megaflow" logs "crash/$name" >"$tmp/got" || true
	if cmp -s "$tmp/want" "$tmp/got"; then
		echo "crash/$name: log complete ($(wc -c <"$tmp/got") bytes)"
	else
		echo "FAIL crash/$name: log of $(wc -c <"$tmp/got") bytes, want $(wc -c <"$tmp/want") ($(cmp "$tmp/want" "$tmp/got" 2>&1 | head -1))" >&2
		fail=1
	fi
done
python3 - "$tmp/tasks.json" <<'PY' || fail=1
import json, sys
d = json.load(open(sys.argv[1]))
tasks = d if isinstance(d, list) else d.get("tasks", [])
bad = [t["id"] for t in tasks if t.get("state") != "TASK_STATE_SUCCEEDED" or len(t.get("attempts", [])) != 1 or not t.get("result")]
print(f"{len(tasks) - len(bad)} of {len(tasks)} tasks SUCCEEDED at their first attempt with a result")
sys.exit(1 if bad or len(tasks) != 11 else 0)
PY
[ "$fail" = 0 ] && echo "ok" || { echo "FAIL (logs under $tmp are removed on exit; worker log follows)" >&2; tail -20 "$tmp/worker.log" >&2; exit 1; }
