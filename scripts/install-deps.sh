#!/usr/bin/env bash
# Installs what the tests and the demo need beyond Go: iproute2 for
# `ip netns`, and Debian's containerd and runc for the runtime suite
# (e2e/runtime drives a real containerd through the CRI API, as the
# kubelet does). Idempotent; needs root only when something is missing.
set -euo pipefail

missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v containerd >/dev/null 2>&1 || missing+=(containerd)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v go >/dev/null 2>&1 || { echo "install-deps: Go is required (https://go.dev/doc/install)" >&2; exit 1; }

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
# Modules come from the Go module proxy; fetching them up front keeps test
# timeouts about tests.
go mod download
