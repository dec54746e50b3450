#!/bin/sh
# Installs Debian's chromium, which the browser tests drive headless,
# unless it is installed already. Runs apt-get as root, or with sudo.
set -eu

if command -v chromium >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
	as_root=""
elif command -v sudo >/dev/null 2>&1; then
	as_root="sudo"
else
	echo "install-deps.sh: need root or sudo to install chromium" >&2
	exit 1
fi
echo "installing: chromium"
$as_root apt-get update
# $as_root is word-split on purpose.
# shellcheck disable=SC2086
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
