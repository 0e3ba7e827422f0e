package testbed

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// Generation is the handle naming of a Calico release.
type Generation string

const (
	// Modern is Calico 3.x: ADD keys by <network>.<containerID>; DEL
	// releases that and then the pod-name handle.
	Modern Generation = "modern"
	// Legacy is Calico 2.x: ADD and DEL key by namespace.podname when the
	// pod is known, so every incarnation of a pod shares one handle.
	Legacy Generation = "legacy"
)

// simulatorEnv selects the generation in the simulator. A real
// calico-ipam is always modern; see RekeyToPodHandle.
func (g Generation) simulatorEnv(bin Binaries) []string {
	if bin.RealCalico {
		return nil
	}
	if g == Legacy {
		return []string{"CALICO_SIM_HANDLES=legacy"}
	}
	return []string{"CALICO_SIM_HANDLES=modern"}
}

// RekeyToPodHandle gives a real (modern) calico-ipam's allocation for a
// pod's container
// the handle Calico 2.x would have used: it moves the addresses of
// <network>.<containerID> to namespace.podname, in Calico's format, as an
// upgraded cluster carries them. It does so only for addresses whose
// attributes name the pod, that is when calico-ipam itself saw the pod's
// identity on ADD; without it Calico 2.x keyed by container ID, which
// changes nothing a DEL does.
func RekeyToPodHandle(ctx context.Context, cli *clientv3.Client, network, containerID string, pod Pod) error {
	if pod.Name == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	from, to := network+"."+containerID, pod.Namespace+"."+pod.Name
	r := rekey{from: from, to: to, pod: pod}
	if err := r.plan(ctx, cli); err != nil {
		return fmt.Errorf("moving %s to legacy handle %s: %w", from, to, err)
	}
	if err := r.commit(ctx, cli); err != nil {
		return fmt.Errorf("moving %s to legacy handle %s: %w", from, to, err)
	}
	return nil
}

// rekey is one handle move, planned against the revisions it read.
type rekey struct {
	from, to string
	pod      Pod
	cmps     []clientv3.Cmp
	ops      []clientv3.Op
}

func (r *rekey) plan(ctx context.Context, cli *clientv3.Client) error {
	var src, dst calico.Handle
	srcRev, err := calico.ReadJSON(ctx, cli, calico.HandleKey(r.from), &src)
	if err != nil || srcRev == 0 {
		return err // no handle: nothing was allocated
	}
	dstRev, err := calico.ReadJSON(ctx, cli, calico.HandleKey(r.to), &dst)
	if err != nil {
		return err
	}
	moved := 0
	for cidr := range src.Block {
		n, err := r.planBlock(ctx, cli, cidr)
		if err != nil {
			return err
		}
		if n > 0 {
			src.Remove(netip.MustParsePrefix(cidr), n)
			dst.Add(netip.MustParsePrefix(cidr), n)
			moved += n
		}
	}
	if moved == 0 {
		r.ops = nil // calico-ipam did not know the pod: nothing to move
		return nil
	}
	r.guard(calico.HandleKey(r.from), srcRev)
	r.guard(calico.HandleKey(r.to), dstRev)
	if src.Empty() {
		r.ops = append(r.ops, clientv3.OpDelete(calico.HandleKey(r.from)))
	} else if err := r.put(calico.HandleKey(r.from), src); err != nil {
		return err
	}
	return r.put(calico.HandleKey(r.to), dst)
}

// planBlock renames the handle of the pod's attributes in one block and
// returns how many addresses moved.
func (r *rekey) planBlock(ctx context.Context, cli *clientv3.Client, cidr string) (int, error) {
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return 0, fmt.Errorf("handle %s names block %q: %w", r.from, cidr, err)
	}
	var b calico.Block
	rev, err := calico.ReadJSON(ctx, cli, calico.BlockKey(prefix), &b)
	if err != nil || rev == 0 {
		return 0, err
	}
	renamed := map[int]bool{}
	for i, a := range b.Attributes {
		if a.Handle() == r.from && a.Secondary["namespace"] == r.pod.Namespace && a.Secondary["pod"] == r.pod.Name {
			to := r.to
			b.Attributes[i].HandleID = &to
			renamed[i] = true
		}
	}
	n := 0
	for _, idx := range b.Allocations {
		if idx != nil && renamed[*idx] {
			n++
		}
	}
	if n == 0 {
		return 0, nil
	}
	r.guard(calico.BlockKey(prefix), rev)
	return n, r.put(calico.BlockKey(prefix), b)
}

func (r *rekey) guard(key string, rev int64) {
	r.cmps = append(r.cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
}

func (r *rekey) put(key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", key, err)
	}
	r.ops = append(r.ops, clientv3.OpPut(key, string(b)))
	return nil
}

func (r *rekey) commit(ctx context.Context, cli *clientv3.Client) error {
	if len(r.ops) == 0 {
		return nil
	}
	resp, err := cli.Txn(ctx).If(r.cmps...).Then(r.ops...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("Calico's data changed while rewriting it; tests run one command at a time, so something else writes")
	}
	return nil
}
