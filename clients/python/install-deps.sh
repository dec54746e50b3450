#!/bin/sh
# Installs the Debian packages the Python client needs, unless they are
# installed already. They go to Debian's /usr/bin/python3, which is the
# interpreter to use (PyPI is not needed). Runs apt-get as root, or with sudo.
set -eu
exec "$(dirname "$0")/../../tools/install-debian-packages.sh" python3-grpcio python3-protobuf python3-grpc-tools
