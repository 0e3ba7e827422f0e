#!/usr/bin/env bash
# Install safe-ipam on this node from a node-provisioning script.
#
#   scripts/install.sh [--binary PATH] [safe-ipam install flags...]
#
# It runs `safe-ipam install` (default --mode=takeover, /opt/cni/bin,
# /etc/cni/net.d), then `safe-ipam doctor`, and exits non-zero unless the
# node is protected. Install is all or nothing: on a refusal nothing
# changed and the message says why. Calico's installer undoes the install
# on every calico-node start, so keep `safe-ipam install --watch` running
# (deploy/safe-ipam.yaml does) or run this again after each one.
set -euo pipefail

binary=""
if [[ "${1:-}" == "--binary" ]]; then
	binary="$2"
	shift 2
fi
if [[ -z "$binary" ]]; then
	binary="$(command -v safe-ipam || true)"
fi
if [[ -z "$binary" || ! -x "$binary" ]]; then
	echo "install.sh: no safe-ipam binary: pass --binary PATH or put safe-ipam on PATH (make build puts it in bin/)" >&2
	exit 2
fi

# doctor takes only the directory flags of install's.
doctor_flags=()
for arg in "$@"; do
	case "$arg" in
	--cni-bin-dir=* | --cni-conf-dir=*) doctor_flags+=("$arg") ;;
	esac
done

"$binary" install "$@"
"$binary" doctor "${doctor_flags[@]}"
