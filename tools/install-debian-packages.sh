#!/bin/sh
# Installs the Debian packages named as arguments, unless they are
# installed already. Runs apt-get as root, or with sudo. The install-deps.sh
# scripts of the test suites that need Debian packages call it.
set -eu

missing=""
for p in "$@"; do
	if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
		missing="$missing $p"
	fi
done
if [ -z "$missing" ]; then
	exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
	as_root=""
elif command -v sudo >/dev/null 2>&1; then
	as_root="sudo"
else
	echo "install-debian-packages.sh: need root or sudo to install:$missing" >&2
	exit 1
fi
echo "installing:$missing"
$as_root apt-get update
# $missing and $as_root are word-split on purpose.
# shellcheck disable=SC2086
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
