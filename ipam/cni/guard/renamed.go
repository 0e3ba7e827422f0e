package guard

import (
	"context"

	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// releaseRenamed releases the record of att kept under another Calico
// name, when this DEL found none under the node's name now: the node was
// renamed, or its stale nodename fixed, while the pod ran. Kept, the
// record would fence its addresses for ever once this DEL has freed them
// (issue 41, item 2.4). The record is found through the address index
// from the DEL's prevResult, so without one (or with a file store, which
// holds this machine's records under any name) nothing is read; an index
// entry that names another attachment costs one read. The runtime's DEL
// of that very attachment (a container ID is one runtime's) is the
// evidence the rulebook judges, as for the DEL itself: whichever host
// wrote the record, and its pod-name handle by the DEL's word. A store
// that does not answer fails the DEL with 11, so the runtime retries it.
func (g *Guard) releaseRenamed(ctx context.Context, att record.Attachment, ips []string, cniPath string) error {
	cluster, ok := g.store.(store.Cluster)
	if !ok {
		return nil
	}
	for _, ip := range ips {
		h, err := cluster.Holder(ctx, att.Network, ip)
		if err != nil {
			return storeError("finding the holder of "+ip, err)
		}
		if h == nil || h.Attachment != att || h.Node == g.node || h.Node == "" {
			continue
		}
		st := cluster.ForNode(h.Node)
		holder, err := st.Get(ctx, att)
		if err != nil {
			return storeError("reading "+att.String()+" under node "+h.Node, err)
		}
		if holder == nil {
			continue // released meanwhile
		}
		other := g.underName(h.Node, st)
		w := other.Witness(delListing(att, h.Node), false)
		if v := w.Judge(holder); !v.Release {
			g.log.Info("a record of this attachment under another node name is kept", "attachment", att.String(), "node", h.Node, "why", v.Why)
			return nil
		}
		if err := other.collect(ctx, holder, cniPath, w, runtimeDEL); err != nil {
			return err
		}
		g.log.Warn("released the record of this attachment under a former node name", "attachment", att.String(), "node", h.Node, "ips", holder.IPs)
		return nil
	}
	return nil
}

// underName is this Guard over the records st keeps under node, another
// Calico name of this machine's: unlike ForNode's, that node lives.
func (g *Guard) underName(node string, st store.Store) *Guard {
	other := *g
	other.node, other.store = node, st
	return &other
}

// delListing is the runtime's DEL of att as a listing for node: it says
// att is gone, and nothing of any other attachment. It is bound to no
// machine's runtime (Host ""): it names the container itself.
func delListing(att record.Attachment, node string) *rulebook.Listing {
	return &rulebook.Listing{Source: "the runtime's DEL of " + att.String(), Node: node, Entries: 1,
		Attachment: func(containerID, ifname string) bool { return containerID != att.ContainerID || ifname != att.IfName }}
}
