package rulebook

import (
	"fmt"
	"sort"
	"strings"
)

// DefaultMaxGoneShare is the share of the nodes known (listed by Calico,
// or holding records) that may be gone at once; above it a sweep releases
// nothing: like the Kubernetes node lifecycle
// controller's unhealthy-zone threshold, a listing that suddenly lacks
// many nodes is more likely the observer's fault (a wrong prefix, a
// datastore restored from an old backup, a misconfigured endpoint) than
// the nodes'.
const DefaultMaxGoneShare = 0.5

// NodesListing is what a dead-node sweep read: Calico's Nodes, and which
// nodes hold records.
type NodesListing struct {
	// Self is the node the sweep runs on: it runs, so a listing without
	// it is wrong.
	Self  string
	Known map[string]bool
	// Recorded are the nodes that hold records of the network.
	Recorded []string
	// MaxGoneShare is the largest share of the nodes known (Known and
	// Recorded together) that may be gone at once (DefaultMaxGoneShare
	// when 0).
	MaxGoneShare float64
}

// TrustNodes says why a Nodes listing is no evidence of any node's death
// ("" when it is): it lacks the sweeping node itself, or more than
// MaxGoneShare of the nodes known (listed, or holding records) are gone
// at once. Then nothing is released, and no node is noted gone.
func TrustNodes(n NodesListing) string {
	if !n.Known[n.Self] {
		return fmt.Sprintf("Calico's Nodes lack this very node %s, which runs: the listing is wrong (a wrong prefix or endpoint, a datastore restored from an old backup), so no node's absence from it is evidence", n.Self)
	}
	var gone []string
	for _, node := range n.Recorded {
		if !n.Known[node] {
			gone = append(gone, node)
		}
	}
	share := n.MaxGoneShare
	if share <= 0 {
		share = DefaultMaxGoneShare
	}
	all := len(n.Known) + len(gone)
	if float64(len(gone)) <= share*float64(all) {
		return ""
	}
	sort.Strings(gone)
	return fmt.Sprintf("Calico's Nodes lack %d of the %d nodes known (listed, or holding records: %s gone), more than the share %.2f that may go at once: more likely a fault of the listing than of the nodes; nothing is released",
		len(gone), all, strings.Join(gone, ", "), share)
}
