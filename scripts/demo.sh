#!/usr/bin/env bash
# The README's main job: the StatefulSet late-DEL incident, with and
# without safe-ipam, in real network namespaces. Needs root.
set -euo pipefail
bin="${1:-bin}"
if [ "$(id -u)" != 0 ]; then
  echo "demo: must run as root (it creates network namespaces); try: sudo make demo" >&2
  exit 1
fi
if ! ip netns list >/dev/null 2>&1; then
  echo "demo: 'ip netns' is not available; install iproute2 (scripts/install-deps.sh)" >&2
  exit 1
fi
exec "$bin/demo" -bin "$bin"
