// Package cluster is the suite that runs safe-ipam where operators run it:
// on real Kubernetes clusters (e2e/harness/kubenode) of one node and of
// three, with Calico's layout on every node (one multi-call binary
// installed as calico and calico-ipam, and 10-calico.conflist, as
// calico-node's installer writes them), and safe-ipam deployed by
// deploy/safe-ipam.yaml as written, from the image built here. On one
// node: the pod lifecycles of issue 23 (a StatefulSet force delete under
// Calico 2.x handles, calico-node restarts, a DaemonSet upgrade, kubelet
// and containerd restarts, a DEL that never comes, the uninstall). On
// three: the cross-node stories of issue 34 (a partition and return, a
// node's death, an outside release handed to another node, a rollout and
// uninstall across the cluster, the elected collector's death), with
// Calico's kube-controllers played by e2e/harness/releaser where a story
// needs it. CALICO_CNI=/path/to/calico runs them with Calico's own binary
// instead of the simulator, CALICO_KUBE_CONTROLLERS with Calico's own
// kube-controllers.
package cluster
