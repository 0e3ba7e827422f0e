package chaos

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Observation is what the checker reads after a step: Calico's data in
// etcd and safe-ipam's records on every node; on Calico's Kubernetes
// datastore, also the claims.
type Observation struct {
	Calico  *calicosim.Snapshot
	Records map[record.Attachment]*record.Record
	Claims  []*claims.Claim
}

// Observe reads Calico's IPAM data in one consistent read (on the
// Kubernetes datastore, one list per kind, while no call runs), then every
// record.
func (c *Cluster) Observe(ctx context.Context) (*Observation, error) {
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	obs := &Observation{Records: map[record.Attachment]*record.Record{}}
	var err error
	if c.setup.Kube() {
		obs.Calico, obs.Claims, err = c.kube.state(ctx)
	} else {
		obs.Calico, err = calicosim.State(ctx, c.cli)
	}
	if err != nil {
		return nil, err
	}
	stores, err := c.stores()
	if err != nil {
		return nil, err
	}
	defer closeFileStores(c.setup, stores)
	if c.setup.Store == EtcdStore && c.setup.SharedPrefix {
		// Records are kept by Calico name: two nodes may share one (a
		// stale nodename), and a renamed node's stay under its former.
		stores = map[string]store.Store{}
		for _, name := range c.calicoNames() {
			stores[name] = etcdstore.NewWithClient(c.cli, c.etcdPrefix(name), name, normalTimeout)
		}
	}
	for n, s := range stores {
		// Each node's store lists its own records, also under a shared prefix.
		recs, err := s.List(ctx, Network)
		if err != nil {
			return nil, fmt.Errorf("records of %s: %w", n, err)
		}
		for _, r := range recs {
			if _, dup := obs.Records[r.Attachment]; dup {
				return nil, fmt.Errorf("record of %s kept by two nodes", r.Attachment)
			}
			obs.Records[r.Attachment] = r
		}
	}
	return obs, nil
}

// Dump is Calico's IPAM data and the records, for failure reports.
func (c *Cluster) Dump(ctx context.Context) string {
	obs, err := c.Observe(ctx)
	if err != nil {
		return fmt.Sprintf("(cannot read state: %v)", err)
	}
	out := map[string]any{"allocations": describeAllocations(obs), "handles": obs.Calico.Handles}
	recs := map[string]any{}
	for att, r := range obs.Records {
		recs[att.String()] = map[string]any{"state": r.State, "ips": r.IPs, "handle": r.Handle}
	}
	out["records"] = recs
	b, _ := json.MarshalIndent(out, "", "  ")
	return string(b)
}

func describeAllocations(obs *Observation) map[string]string {
	out := map[string]string{}
	for _, a := range obs.Calico.Allocations() {
		out[a.IP.String()] = a.Handle
	}
	return out
}
