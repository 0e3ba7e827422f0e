package testbed

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
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
// pod's container the handle Calico 2.x would have used: it moves the
// addresses of <network>.<containerID> to namespace.podname, in Calico's
// format, as an upgraded cluster carries them. It does so only for
// addresses whose attributes name the pod, that is when calico-ipam itself
// saw the pod's identity on ADD; without it Calico 2.x keyed by container
// ID, which changes nothing a DEL does.
//
// It writes through ds as calico-ipam would: the new handle and the
// renamed attributes first, then the old handle, each guarded by the
// versions read. Tests run one command at a time, so a conflict means
// something else writes.
func RekeyToPodHandle(ctx context.Context, ds datastore.Datastore, network, containerID string, pod Pod) error {
	if pod.Name == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	from, to := network+"."+containerID, pod.Namespace+"."+pod.Name
	if err := rekey(ctx, ds, from, to, pod); err != nil {
		return fmt.Errorf("moving %s to legacy handle %s: %w", from, to, err)
	}
	return nil
}

func rekey(ctx context.Context, ds datastore.Datastore, from, to string, pod Pod) error {
	src, err := ds.Handle(ctx, from)
	if err != nil || src == nil {
		return err // no handle: nothing was allocated
	}
	var blocks []*datastore.Block
	moved := calico.NewHandle()
	for cidr := range src.Handle.Block {
		prefix, err := netip.ParsePrefix(cidr)
		if err != nil {
			return fmt.Errorf("handle %s names block %q: %w", from, cidr, err)
		}
		b, err := ds.Block(ctx, prefix)
		if err != nil {
			return err
		}
		if n := renameAttributes(b, from, to, pod); n > 0 {
			blocks = append(blocks, b)
			moved.Add(prefix, n)
		}
	}
	if moved.Empty() {
		return nil // calico-ipam did not know the pod: nothing to move
	}
	dst, err := ds.Handle(ctx, to)
	if err != nil {
		return err
	}
	if dst == nil {
		dst = &datastore.Handle{ID: to, Handle: calico.NewHandle()}
	}
	for cidr, n := range moved.Block {
		dst.Handle.Add(netip.MustParsePrefix(cidr), n)
		src.Handle.Remove(netip.MustParsePrefix(cidr), n)
	}
	if err := ds.Write(ctx, datastore.Change{Blocks: blocks, Handle: dst, HandleFirst: true}); err != nil {
		return err
	}
	return ds.Write(ctx, datastore.Change{Handle: src})
}

// renameAttributes gives the pod's attributes of handle from in b (nil:
// absent) the handle to, and returns how many addresses moved.
func renameAttributes(b *datastore.Block, from, to string, pod Pod) int {
	if b == nil {
		return 0
	}
	renamed := map[int]bool{}
	for i, a := range b.Block.Attributes {
		if a.Handle() == from && a.Secondary["namespace"] == pod.Namespace && a.Secondary["pod"] == pod.Name {
			b.Block.Attributes[i].HandleID = &to
			renamed[i] = true
		}
	}
	n := 0
	for _, idx := range b.Block.Allocations {
		if idx != nil && renamed[*idx] {
			n++
		}
	}
	return n
}
