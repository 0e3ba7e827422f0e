// Package containerd is the suites' node on the kubelet's path: a real
// containerd, driven over the CRI API (k8s.io/cri-api runtime/v1) exactly
// as the kubelet drives it, calls the CNI plugins. Each node of a test gets its
// own containerd, with its own root, state, socket and CNI directories,
// inside a private mount, network and PID namespace that a long-lived
// holder process keeps: libcni's result cache path is fixed at
// /var/lib/cni/results (bind-mounted to the test's directory there), and
// ptp turns on ip_forward for the whole network namespace. Killing the
// holder ends every process in its PID namespace: containerd, its shims
// and the pods.
//
// No registry can be reached, so the sandbox image is built in the test:
// a static Go pause program packed as a one-layer docker-archive and
// imported with `ctr -n k8s.io images import`.
package containerd
