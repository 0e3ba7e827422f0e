package calico

// AffinityState is the life-cycle state of a host's claim on a block.
type AffinityState string

// Affinity states. A node allocates only from blocks it holds confirmed.
const (
	AffinityPending         AffinityState = "pending"
	AffinityConfirmed       AffinityState = "confirmed"
	AffinityPendingDeletion AffinityState = "pendingDeletion"
)

// Affinity records a node's claim on a block, stored under
// AffinityKey(node, cidr).
type Affinity struct {
	State   AffinityState `json:"state"`
	Deleted bool          `json:"deleted"`
}

// ConfirmedAffinity is the value a node writes once it owns a block.
func ConfirmedAffinity() Affinity { return Affinity{State: AffinityConfirmed} }
