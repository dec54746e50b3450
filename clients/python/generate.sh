#!/bin/sh
# Generates the Python gRPC stubs of proto/ into the directory given
# (default: build/ beside this script, which git ignores), then checks that
# they import. Put that directory on PYTHONPATH (informerhub_client.py also
# looks in build/ by itself).
#
# It uses the protoc bundled with Debian's python3-grpc-tools (1.14, protoc
# 3.5): its output is old-style but runs on Debian's python3-protobuf 3.21.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
proto=$(cd "$here/../../proto" && pwd)
out=${1:-$here/build}
python=${PYTHON:-/usr/bin/python3}

if ! "$python" -c 'import grpc_tools.protoc, grpc, google.protobuf' 2>/dev/null; then
	echo "generate.sh: $python lacks grpcio, protobuf or grpc_tools: run \`make python-deps\`" >&2
	exit 1
fi

mkdir -p "$out"
rm -rf "$out/informerhub"
"$python" -m grpc_tools.protoc -I "$proto" --python_out="$out" --grpc_python_out="$out" \
	"$proto/informerhub/v1/informerhub.proto"
PYTHONPATH="$out" "$python" -c 'from informerhub.v1 import informerhub_pb2, informerhub_pb2_grpc'
