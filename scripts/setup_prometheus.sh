#!/usr/bin/env bash
# Installs the system tools the monitoring and deploy tests run: prometheus
# and promtool (Debian package prometheus) for the metrics tests in package
# server, systemd-analyze (package systemd) for deploy/provider.service's
# test. Idempotent: it does nothing when all three are on PATH.
#
# The package's own service is not started: the install runs under a
# policy-rc.d that refuses every start (removed afterwards), and the tests
# start their own Prometheus on a free port.
#
# Without apt-get it stops with an error that says what to install.
set -euo pipefail

need=()
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
	need+=(prometheus)
fi
if ! command -v systemd-analyze >/dev/null; then
	need+=(systemd)
fi
if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi

if ! command -v apt-get >/dev/null; then
	cat >&2 <<EOF

************************************************************************
  apt-get is not available: cannot install ${need[*]}.
  The metrics and deploy tests need prometheus, promtool and
  systemd-analyze on PATH and fail without them. Install them with this
  system's package manager (Debian/Ubuntu: apt-get install prometheus
  systemd; macOS: brew install prometheus, and run the systemd test on
  Linux).
************************************************************************

EOF
	exit 1
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
	sudo=(sudo)
fi

policy=/usr/sbin/policy-rc.d
own_policy=false
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
	"${sudo[@]}" chmod 0755 "$policy"
	own_policy=true
fi
cleanup() {
	if $own_policy; then
		"${sudo[@]}" rm -f "$policy"
	fi
}
trap cleanup EXIT

echo "installing ${need[*]} with apt-get" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq >&2
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >&2

for tool in prometheus promtool systemd-analyze; do
	if ! command -v "$tool" >/dev/null; then
		echo "apt-get installed ${need[*]} but $tool is still not on PATH" >&2
		exit 1
	fi
done
