#!/usr/bin/env bash
# Regenerates the Python SDK's stubs (client/python/src/megaflow/_proto) from
# proto/megaflow/v1 and client/python/proto, with Debian's protoc (3.21) and
# grpc_python_plugin (apt-get install protobuf-compiler protobuf-compiler-grpc),
# so that they load with Debian's python3-protobuf 3.21 and python3-grpcio 1.51.
#
# Post-processing: protoc writes imports by proto package
# ("from megaflow.v1 import types_pb2 as ..."), which would resolve against
# the top-level package megaflow (the SDK itself) and fail. The stubs are
# flattened into one directory and those imports rewritten to relative ones
# ("from . import types_pb2 as ..."), so they load as the subpackage
# megaflow._proto wherever the SDK is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

PROTOC=${PROTOC:-protoc}
PLUGIN=${GRPC_PYTHON_PLUGIN:-$(command -v grpc_python_plugin || echo /usr/bin/grpc_python_plugin)}
OUT=client/python/src/megaflow/_proto
[ -x "$PLUGIN" ] || { echo "grpc_python_plugin not found: apt-get install protobuf-compiler-grpc" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The client API only: service.proto, sandbox.proto and what they import
# (command.proto is the heads' Raft log, not needed by clients).
"$PROTOC" -I proto -I client/python/proto \
	--python_out="$tmp" --pyi_out="$tmp" \
	--plugin=protoc-gen-grpc_python="$PLUGIN" --grpc_python_out="$tmp" \
	megaflow/v1/types.proto megaflow/v1/worker.proto megaflow/v1/service.proto megaflow/v1/sandbox.proto \
	megaflow/sdk/rpc_status.proto

rm -f "$OUT"/*_pb2.py "$OUT"/*_pb2.pyi "$OUT"/*_pb2_grpc.py
for f in "$tmp"/megaflow/v1/* "$tmp"/megaflow/sdk/*; do
	sed -E 's/^from megaflow\.(v1|sdk) import /from . import /' "$f" > "$OUT/$(basename "$f")"
done
# Only service.proto and sandbox.proto define services the SDK calls; drop
# the empty *_pb2_grpc.py protoc writes for the others.
for f in "$OUT"/*_pb2_grpc.py; do
	case "$(basename "$f")" in service_pb2_grpc.py | sandbox_pb2_grpc.py) ;; *) rm -f "$f" ;; esac
done
# protoc emits no __init__.py; keep ours (it documents the directory).
[ -f "$OUT/__init__.py" ] || printf '"""Generated protobuf and gRPC stubs (scripts/gen-proto-python.sh); do not edit."""\n' > "$OUT/__init__.py"
echo "wrote $(ls "$OUT" | wc -l) files to $OUT"
