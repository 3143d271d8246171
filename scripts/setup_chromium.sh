#!/usr/bin/env bash
# Installs Debian's chromium, the headless browser the dashboard's browser
# test drives (server/dashboard_test.go). Idempotent: it does nothing when a
# chromium binary is already on PATH. Needs apt-get and root (or sudo); when
# either is missing it says so loudly and fails, since the test then fails
# too. Prints the browser's path on stdout (nothing else goes to stdout).
set -euo pipefail

for name in chromium chromium-browser; do
	if bin=$(command -v "$name"); then
		echo "$bin"
		exit 0
	fi
done

fail() {
	{
		echo "************************************************************"
		echo "setup_chromium.sh: $*"
		echo "The dashboard's browser test needs chromium; install it with"
		echo "  apt-get install -y --no-install-recommends chromium"
		echo "or put a chromium binary on PATH."
		echo "************************************************************"
	} >&2
	exit 1
}

command -v apt-get >/dev/null || fail "apt-get is not available on this machine."
sudo=()
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || fail "installing packages needs root, and sudo is not available."
	sudo=(sudo)
fi

echo "installing chromium with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo[@]}" apt-get install -y --no-install-recommends chromium >&2; then
	# The package lists may be stale or absent: refresh them once.
	"${sudo[@]}" apt-get update >&2 || fail "apt-get update failed."
	"${sudo[@]}" apt-get install -y --no-install-recommends chromium >&2 || fail "apt-get install chromium failed."
fi
bin=$(command -v chromium) || fail "apt-get installed chromium but no chromium binary is on PATH."
"$bin" --version >&2
echo "$bin"
