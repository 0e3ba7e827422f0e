#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v3, pinned by the tools module e2e/tools/helm)
# once per version into a cache directory that survives between runs and
# clones, and prints the binary's path: the chart's tests run it (helm
# lint, helm template), and the cluster suite installs safe-ipam with it.
# A no-op (seconds) when the binary is already there; a cold build takes
# 1 to 3 minutes on 2 cores.
#
#   scripts/helm.sh
#
#   HELM_CACHE  the cache directory (${XDG_CACHE_HOME:-$HOME/.cache}/safe-ipam)
#   HELM        an existing helm to use instead: printed as is
set -euo pipefail

# found prints the binary and ends the script when it is there.
found() {
	[ -x "$1" ] || return 0
	echo "$1"
	exit 0
}

if [ -n "${HELM:-}" ]; then
	found "$HELM"
	echo "helm.sh: HELM=$HELM is not an executable file" >&2
	exit 1
fi
module="$(cd "$(dirname "$0")/../e2e/tools/helm" && pwd)"
version="$(cd "$module" && go list -m -f '{{.Version}}' helm.sh/helm/v3)"
dir="${HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safe-ipam}/helm-$version"
found "$dir/helm"
mkdir -p "$dir"
# Test packages that start at once on a cold cache build it once: the
# others wait for the lock and find the binary.
exec 9>"$dir/.lock" && flock 9 && found "$dir/helm"
bin="$dir/helm"
tmp="$(mktemp "$dir/.helm.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
echo "helm.sh: building helm $version into $dir" >&2
pkg=helm.sh/helm/v3/internal/version
(cd "$module" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath \
	-ldflags "-s -w -X $pkg.version=$version" -o "$tmp" helm.sh/helm/v3/cmd/helm)
chmod 0755 "$tmp"
mv "$tmp" "$bin"
trap - EXIT
echo "$bin"
