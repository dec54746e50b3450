#!/bin/sh
# Installs the Debian packages the browser and plain-HTTP tests need,
# unless they are installed already: chromium, which the browser tests
# drive headless, and curl, which runs docs/http.md. Runs apt-get as root,
# or with sudo.
set -eu
exec "$(dirname "$0")/../../tools/install-debian-packages.sh" chromium curl
