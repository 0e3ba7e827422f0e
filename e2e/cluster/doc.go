// Package cluster is the suite that runs safe-ipam where operators run it:
// on a real one-node Kubernetes cluster (e2e/harness/kubenode) with
// Calico's layout on the node (one multi-call binary installed as calico
// and calico-ipam, and 10-calico.conflist, as calico-node's installer
// writes them), and safe-ipam deployed by deploy/safe-ipam.yaml as written,
// from the image built here. Its tests are the pod lifecycles of issue 23:
// a StatefulSet force delete under Calico 2.x handles, calico-node
// restarts, a DaemonSet upgrade, kubelet and containerd restarts, a DEL
// that never comes, and the uninstall. CALICO_CNI=/path/to/calico runs them
// with Calico's own binary instead of the simulator.
package cluster
