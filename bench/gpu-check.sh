#!/usr/bin/env bash
# gpu-check.sh: on a machine with real NVIDIA GPUs, checks that MegaFlow
# tasks see exactly the GPUs the head assigned them. Not part of CI.
#
# It builds the binaries (the worker with cgo, for NVML), starts one head
# and one worker on loopback, and runs a 1-GPU task and, when the machine
# has two GPUs or more, a 2-GPU task. Each task prints `nvidia-smi -L` and
# CUDA's device count and device UUIDs (through the driver API, libcuda, from
# python3's ctypes: no CUDA toolkit or PyTorch needed) and records them as
# its result. The script then compares, per task, CUDA's devices with the
# GPU UUIDs of the attempt in the task table: same count, same UUIDs. With
# RUNTIME=docker (needs the NVIDIA Container Toolkit and an IMAGE holding
# python3), `nvidia-smi -L` inside must list exactly those devices too; the
# process runtime pins by CUDA_VISIBLE_DEVICES only, so there nvidia-smi
# lists every GPU and is shown for information.
#
#   bench/gpu-check.sh                         # process runtime
#   RUNTIME=docker IMAGE=my/cuda-python:tag bench/gpu-check.sh
#
# Needs: go, a C compiler (cgo), python3, nvidia-smi and the NVIDIA driver.
# Data and logs go under ${MEGAFLOW_RUN_DIR:-/tmp/megaflow-gpu-check}. Exit
# status 0: every task saw exactly its devices.
set -euo pipefail
cd "$(dirname "$0")/.."
runtime=${RUNTIME:-process}
image=${IMAGE:-none}
dir=${MEGAFLOW_RUN_DIR:-/tmp/megaflow-gpu-check}

die() { echo "gpu-check: $*" >&2; exit 1; }
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this check needs a machine with NVIDIA GPUs and their driver"
command -v python3 >/dev/null || die "python3 not found: the tasks and the checks use it"
ngpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
[ "$ngpus" -ge 1 ] || die "nvidia-smi lists no GPU"
if [ "$runtime" = docker ] && [ "$image" = none ]; then
  die "RUNTIME=docker needs IMAGE=<an image with python3>; the NVIDIA runtime adds nvidia-smi and libcuda"
fi

echo "== machine: $ngpus GPU(s)"
nvidia-smi -L
echo "== building bin/ (the worker links NVML through cgo)"
make build >/dev/null

rm -rf "$dir"; mkdir -p "$dir"
export MEGAFLOW_HEADS=127.0.0.1:27071
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
bin/megaflow-head --node-id h1 --data-dir "$dir/h1" --raft-addr 127.0.0.1:27001 --grpc-addr 127.0.0.1:27071 \
  --gossip-addr 127.0.0.1:27941 --bootstrap-expect 1 >>"$dir/h1.log" 2>&1 &
pids+=($!)
bin/megaflow-worker --node-id w1 --data-dir "$dir/w1" --gossip-addr 127.0.0.1:27951 --join 127.0.0.1:27941 \
  --runtime "$runtime" >>"$dir/w1.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 150); do
  bin/megaflow workers --timeout 2s 2>/dev/null | grep ' alive ' | grep -q "/$ngpus " && break
  sleep 0.2
done
bin/megaflow workers
bin/megaflow workers | grep ' alive ' | grep -q "/$ngpus " ||
  die "the worker does not offer $ngpus GPU(s); see $dir/w1.log (NVML found none?)"

# The task: nvidia-smi -L, then CUDA's view through libcuda, as its result.
probe=$(cat <<'PY'
import ctypes, json, os, re, subprocess
cuda = ctypes.CDLL("libcuda.so.1")
rc = cuda.cuInit(0)
n = ctypes.c_int(0)
uuids = []
if rc == 0:
    cuda.cuDeviceGetCount(ctypes.byref(n))
    get_uuid = getattr(cuda, "cuDeviceGetUuid_v2", None) or cuda.cuDeviceGetUuid
    for i in range(n.value):
        dev = ctypes.c_int(0)
        cuda.cuDeviceGet(ctypes.byref(dev), i)
        raw = (ctypes.c_ubyte * 16)()
        get_uuid(raw, dev)
        h = bytes(raw).hex()
        uuids.append("GPU-%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32]))
smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
print(smi, end="")
print("CUDA_VISIBLE_DEVICES=%s" % os.environ.get("CUDA_VISIBLE_DEVICES", ""))
print("cuInit: %d; CUDA device count: %d" % (rc, n.value))
print("MEGAFLOW_RESULT " + json.dumps({"cu_init": rc, "cuda_count": n.value, "cuda_uuids": uuids,
    "smi_uuids": re.findall(r"UUID: (GPU-[0-9a-fA-F-]+)", smi),
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES", "")}))
PY
)
task() { # name gpus
  python3 - "$1" "$2" "$image" "$probe" <<'PY'
import json, sys
name, gpus, image, probe = sys.argv[1:]
print(json.dumps({"name": name, "image": image, "command": ["python3", "-c", probe],
                  "resources": {"cpu_millis": 500, "memory_bytes": "512Mi", "gpus": int(gpus)},
                  "timeout_seconds": 300}))
PY
}
{
  echo "id: gpu-check"
  echo "tasks:"
  echo "  - $(task gpu-1 1)"
  if [ "$ngpus" -ge 2 ]; then echo "  - $(task gpu-2 2)"; fi
} >"$dir/gpu-check.yaml"
[ "$ngpus" -ge 2 ] || echo "== one GPU only: the 2-GPU task is skipped"

echo "== running $dir/gpu-check.yaml"
bin/megaflow submit "$dir/gpu-check.yaml" --wait || true
bin/megaflow tasks gpu-check
for f in "$dir"/w1/logs/gpu-check+*/*.log; do echo "-- $f"; cat "$f"; done

echo "== checking what each task saw against its assignment"
bin/megaflow tasks gpu-check -o json | python3 -c '
import base64, json, sys
runtime = sys.argv[1]
ok = True
for t in json.load(sys.stdin)["tasks"]:
    name, want = t["id"], int(t["spec"]["resources"].get("gpus", 0))
    if t.get("state") != "TASK_STATE_SUCCEEDED":
        print("FAIL %s: %s %s" % (name, t.get("state"), t.get("reason", ""))); ok = False; continue
    assigned = sorted(t["attempts"][-1].get("gpu_uuids", []))
    r = json.loads(base64.b64decode(t["result"]))
    cuda = sorted(r["cuda_uuids"])
    problems = []
    if len(assigned) != want: problems.append("%d GPUs assigned, %d asked" % (len(assigned), want))
    if r["cu_init"] != 0: problems.append("cuInit failed with %d" % r["cu_init"])
    if r["cuda_count"] != want: problems.append("CUDA counts %d devices, want %d" % (r["cuda_count"], want))
    if [u.lower() for u in cuda] != [u.lower() for u in assigned]: problems.append("CUDA sees %s, assigned %s" % (cuda, assigned))
    if runtime == "docker" and sorted(u.lower() for u in r["smi_uuids"]) != [u.lower() for u in assigned]:
        problems.append("nvidia-smi -L lists %s, assigned %s" % (r["smi_uuids"], assigned))
    print("%s %s: asked %d, assigned %s, CUDA sees %d %s" % ("FAIL" if problems else "ok  ", name, want, assigned, r["cuda_count"], cuda))
    for p in problems: print("     " + p)
    ok = ok and not problems
sys.exit(0 if ok else 1)
' "$runtime"
echo "== every task saw exactly its assigned GPUs"
