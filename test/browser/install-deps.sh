#!/bin/sh
# Installs the Debian packages the browser and plain-HTTP tests need,
# unless they are installed already: chromium, which the browser tests
# drive headless, and curl, which runs docs/http.md. Runs apt-get as root,
# or with sudo.
set -eu

missing=""
for p in chromium curl; do
	if ! command -v "$p" >/dev/null 2>&1; then
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
	echo "install-deps.sh: need root or sudo to install:$missing" >&2
	exit 1
fi
echo "installing:$missing"
$as_root apt-get update
# $missing and $as_root are word-split on purpose.
# shellcheck disable=SC2086
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
