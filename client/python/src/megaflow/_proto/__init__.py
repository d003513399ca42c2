"""Generated protobuf and gRPC stubs (scripts/gen-proto-python.sh); do not edit."""
