package chaos

import (
	"fmt"
	"time"
)

// The parts a history chooses (Setup) and the fixed ones every cluster
// holds: the network, the pools, the nodes, the timeouts.

// Network is the network every history attaches to, Calico's usual name.
const Network = "k8s-pod-network"

// Namespace holds the StatefulSet whose pods the histories recreate.
const Namespace = "default"

// IfName is the interface of every attachment: Calico gives a pod one.
const IfName = "eth0"

// Generation is the handle naming of the Calico release calico-ipam
// imitates.
type Generation string

// The two generations. Legacy (Calico 2.x) keys ADD and DEL by
// namespace.podname, which is what makes a late DEL dangerous; modern
// (Calico 3.x) keys ADD by container and still releases the pod name on
// DEL.
const (
	Legacy Generation = "legacy"
	Modern Generation = "modern"
)

// StoreKind says where safe-ipam keeps its records. NoSafeIPAM runs
// calico-ipam alone: the control, which must show the failure.
// ClaimsStore is Calico's Kubernetes datastore: Calico's data in a real
// kube-apiserver, each node's records in its file store, and their
// addresses claimed cluster-wide as AddressClaims in that API server.
type StoreKind string

// Store kinds.
const (
	FileStore   StoreKind = "file"
	EtcdStore   StoreKind = "etcd"
	ClaimsStore StoreKind = "claims"
	NoSafeIPAM  StoreKind = "none"
)

// Pool is a Calico IP pool the histories allocate from.
type Pool struct {
	Name      string
	CIDR      string
	BlockSize int
}

// The pools every cluster holds; a history names one in its config.
var (
	// WidePool never runs out in a history.
	WidePool = Pool{Name: "chaos-wide", CIDR: "10.96.0.0/24", BlockSize: 28}
	// TightPool has four blocks of four, so nodes claim blocks often and
	// can run out: ADD then fails and safe-ipam's failure path runs.
	TightPool = Pool{Name: "chaos-tight", CIDR: "10.97.0.0/28", BlockSize: 30}
	// SinglePool is one block of four, for scripts that fill it.
	SinglePool = Pool{Name: "chaos-single", CIDR: "10.98.0.0/30", BlockSize: 30}
)

var pools = []Pool{WidePool, TightPool, SinglePool}

// Nodes are the nodes of every cluster; a history uses the first one, two
// or three (the election histories need a dead node and two candidates).
var Nodes = []string{"node1", "node2", "node3"}

// Timeouts of one invocation. Ops that run while etcd is known to be down
// get the short one, so an outage costs little wall time; every other op
// gets the long one, so a loaded machine never makes it fail.
const (
	normalTimeout = 5 * time.Second
	outageTimeout = 300 * time.Millisecond
	// partitionTimeout bounds a held call's store requests, which get no
	// answer during a partition; calico-ipam's etcd still answers.
	partitionTimeout = time.Second
)

// Setup chooses the parts of one history.
type Setup struct {
	Generation Generation
	Store      StoreKind
	Nodes      int // 1 to 3
	Pool       Pool
	// HostLock gives calico-ipam a per-node lock file; without it only
	// etcd's compare-and-swap keeps concurrent allocations apart.
	HostLock bool
	// SharedPrefix keeps every node's etcd records under one prefix, as
	// the default config does. Histories give each node its own prefix:
	// see CrossNodeGCScript.
	SharedPrefix bool
	// StoreBehindProxy reaches the etcd store through the cluster's
	// Proxy, and calico-ipam through a wrapper that can hold an ADD, so
	// that a Partition step can cut the store's answers at the right
	// moment.
	StoreBehindProxy bool
	// Hosts runs each node's processes in a UTS namespace with a host
	// name of its own, as on machines of their own (HostRename changes
	// it); otherwise every node has this machine's.
	Hosts bool
	// SharedName gives node2 node1's Calico name: a stale nodename, as a
	// re-imaged machine that kept /var/lib/calico/nodename has.
	SharedName bool
}

func (s Setup) String() string {
	lock := "etcd-cas"
	if s.HostLock {
		lock = "host-lock"
	}
	out := fmt.Sprintf("%s/%s-store/%d-node/%s/%s", s.Generation, s.Store, s.Nodes, s.Pool.Name, lock)
	if s.Hosts {
		out += "/own-hosts"
	}
	if s.SharedName {
		out += "/stale-nodename"
	}
	return out
}

// Safe says whether safe-ipam fronts calico-ipam.
func (s Setup) Safe() bool { return s.Store != NoSafeIPAM }

// Kube says whether Calico's data is in the Kubernetes API (ClaimsStore);
// else it is in etcd.
func (s Setup) Kube() bool { return s.Store == ClaimsStore }

// fileRecords says whether each node keeps its records in a file store of
// its own (answered without the datastore, gone with the node's disk).
func (s Setup) fileRecords() bool { return s.Store == FileStore || s.Store == ClaimsStore }

// nodes lists the nodes in use.
func (s Setup) nodes() []string { return Nodes[:max(1, min(s.Nodes, len(Nodes)))] }
