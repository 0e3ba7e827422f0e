#!/usr/bin/env bash
# Builds a real Kubernetes command the tests start (kube-apiserver by
# default; kubelet, kube-controller-manager or kube-scheduler for the
# one-node cluster of e2e/cluster), once per version, into a cache directory
# that survives between runs and clones, and prints the binary's path. A
# no-op (seconds) when the binary is already there.
#
#   scripts/kube-apiserver.sh [COMMAND]
#
#   KUBE_APISERVER_VERSION  the k8s.io/kubernetes version (v1.33.13; the tools
#                           module e2e/tools/kube-apiserver pins it)
#   KUBE_APISERVER_CACHE    the cache directory
#                           (${XDG_CACHE_HOME:-$HOME/.cache}/safe-ipam)
#   KUBE_APISERVER          an existing kube-apiserver to use instead: printed
#                           as is (KUBELET, KUBE_CONTROLLER_MANAGER and
#                           KUBE_SCHEDULER do the same for the others)
#
# A cold build of kube-apiserver takes 4 to 12 minutes on 2 cores and about
# 2.2 GB of Go build cache; the other three then take about 80 s together, as
# they share most packages. Each is a 70 to 100 MB static binary
# (CGO_ENABLED=0).
set -euo pipefail

name="${1:-kube-apiserver}"
case "$name" in
kube-apiserver | kubelet | kube-controller-manager | kube-scheduler) ;;
*)
	echo "kube-apiserver.sh: $name is not a command the tests build" >&2
	exit 2
	;;
esac
override_var="$(echo "$name" | tr 'a-z-' 'A-Z_')"
override="${!override_var:-}"
if [ -n "$override" ]; then
	if [ ! -x "$override" ]; then
		echo "kube-apiserver.sh: $override_var=$override is not an executable file" >&2
		exit 1
	fi
	echo "$override"
	exit 0
fi

version="${KUBE_APISERVER_VERSION:-v1.33.13}"
cache="${KUBE_APISERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/safe-ipam}"
dir="$cache/$name-$version"
bin="$dir/$name"
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi

module="$(cd "$(dirname "$0")/../e2e/tools/kube-apiserver" && pwd)"
pinned="$(cd "$module" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
if [ "$pinned" != "$version" ]; then
	echo "kube-apiserver.sh: KUBE_APISERVER_VERSION=$version but $module pins k8s.io/kubernetes $pinned" >&2
	exit 1
fi

# Clients (client-go's discovery, kubectl) parse /version: without these the
# server reports v0.0.0-master+$Format and some of them refuse it.
minor="${version#v*.}"
minor="${minor%%.*}"
major="${version#v}"
major="${major%%.*}"
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
# The same for the apiserver's own copy of the version (used by /version on
# the generic server side in some paths).
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$version"
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitMajor=$major -X k8s.io/client-go/pkg/version.gitMinor=$minor"

mkdir -p "$dir"
# Test packages that start at once on a cold cache build it once: the
# others wait for the lock and find the binary.
exec 9>"$dir/.lock"
flock 9
if [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi
tmp="$(mktemp "$dir/.$name.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
echo "kube-apiserver.sh: building $name $version into $dir (a cold build takes minutes)" >&2
(cd "$module" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -ldflags "$ldflags" -o "$tmp" "k8s.io/kubernetes/cmd/$name")
chmod 0755 "$tmp"
# Rename into place: a build cut short never leaves a binary that looks done.
mv "$tmp" "$bin"
trap - EXIT
echo "$bin"
