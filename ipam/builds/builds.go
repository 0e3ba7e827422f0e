// Package builds is how safe-ipam's three programs reach one another,
// and the one place that says why there are three.
//
// The container runtime runs the CNI binary on every pod start and stop,
// and every call pays the init of every package the binary links. The
// etcd client's init alone was a third of a call (docs/performance.md),
// and the Kubernetes and CRI clients the admin commands need weigh more.
// So safe-ipam ships three builds of one tree, installed side by side in
// the node's CNI bin dir:
//
//   - CNIBinary, the lean build: the CNI verbs over the file store. It
//     hands a call whose record store is etcd to EtcdBinary (HandOver),
//     asks EtcdBinary for each of its rare reads of Calico's etcd
//     (AskEtcdBuild), and hands every admin command to AdminBinary
//     (RunAdmin).
//   - EtcdBinary: the same verbs with the etcd client.
//   - AdminBinary: the admin commands, with every client they use.
//
// Each link is an exec of a binary beside the one that runs, found from
// the running binary's own path, never from PATH or a network config: the
// node decides what runs. Every other package that mentions the split
// refers here.
package builds

// The programs safe-ipam installs in a node's CNI bin dir.
const (
	// CNIBinary is the lean build, which the runtime runs on every pod
	// start and stop.
	CNIBinary = "safe-ipam"
	// AdminBinary holds the admin commands.
	AdminBinary = "safe-ipam-admin"
	// EtcdBinary is the CNI binary's build with the etcd client.
	EtcdBinary = "safe-ipam-etcd"
)
