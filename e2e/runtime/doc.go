// Package runtime is the suite on the kubelet's path: safe-ipam under a
// real containerd driven over the CRI API as the kubelet drives it (the
// harness is e2e/harness/containerd), with StatefulSet recreates, node
// restarts, upgrades and the admin commands against what really runs.
package runtime
