package guard

import (
	"context"

	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// releaseRenamed releases the record of att that this machine wrote under
// another Calico name, when this DEL found none under the node's name now:
// the node was renamed, or its stale nodename fixed, while the pod ran.
// Kept, the record would fence its addresses for ever once this DEL has
// freed them (issue 41, item 2.4). The runtime's DEL of that very
// attachment is the evidence; the rulebook judges it as gc --former-node
// judges this machine's runtime (a record another host wrote there, or
// one without a host, is kept). The record is found through the address
// index from the DEL's prevResult, so without one (or with a file store,
// which holds this machine's records under any name) nothing is read.
func (g *Guard) releaseRenamed(ctx context.Context, att record.Attachment, ips []string, cniPath string) {
	cluster, ok := g.store.(store.Cluster)
	if !ok {
		return
	}
	for _, ip := range ips {
		holder, err := cluster.HolderOf(ctx, att.Network, ip)
		if err != nil {
			g.log.Warn("cannot tell whether a record under a former node name holds the address; gc --former-node releases it", "attachment", att.String(), "ip", ip, "error", err)
			return
		}
		if holder == nil || holder.Attachment != att || holder.Node == g.node || holder.Node == "" {
			continue
		}
		other := g.ForNode(holder.Node, cluster.ForNode(holder.Node))
		w := other.Witness(delListing(att, holder.Node, g.host), false)
		if v := w.Judge(holder); !v.Release {
			g.log.Info("a record of this attachment under another node name is kept", "attachment", att.String(), "node", holder.Node, "why", v.Why)
			return
		}
		if err := other.Collect(ctx, holder, cniPath, w); err != nil {
			g.log.Warn("releasing the record of this attachment under a former node name failed; gc --former-node releases it", "attachment", att.String(), "node", holder.Node, "error", err)
			return
		}
		g.log.Warn("released the record of this attachment under a former node name", "attachment", att.String(), "node", holder.Node, "ips", holder.IPs)
		return
	}
}

// delListing is the runtime's DEL of att as a listing for node, a name
// this machine (host) had: it says att is gone, and nothing of any other
// attachment.
func delListing(att record.Attachment, node, host string) *rulebook.Listing {
	return &rulebook.Listing{Source: "the runtime's DEL of " + att.String(), Node: node, Host: host, Former: true, Entries: 1,
		Attachment: func(containerID, ifname string) bool { return containerID != att.ContainerID || ifname != att.IfName }}
}
