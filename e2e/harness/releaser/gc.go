package releaser

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// leak is an allocation confirmed leaked, with the Kubernetes node its
// Calico node maps to ("" when gone).
type leak struct {
	allocation
	knode string
}

// checkAllocations is kube-controllers' checkAllocations over every node
// (a full scan): it returns the confirmed leaks and the Calico nodes whose
// affinities are to be released. An allocation is a leak candidate when
// valid says no; it is confirmed at once when its node is gone from
// Kubernetes, else once it has been a candidate for longer than LeakGrace
// (never when LeakGrace is 0).
func (s *simulator) checkAllocations(w *world) (confirmed []leak, release []string) {
	// Every node with an affine block is checked, with or without
	// allocations.
	byNode := map[string][]allocation{}
	for _, node := range w.affine {
		byNode[node] = nil
	}
	seen := map[string]bool{}
	for _, a := range w.allocs {
		seen[a.id()] = true
		if a.node() != "" {
			byNode[a.node()] = append(byNode[a.node()], a)
		}
	}
	for id := range s.leaks {
		if !seen[id] {
			delete(s.leaks, id) // released, or re-allocated
		}
	}
	now := time.Now()
	cached := w.lookup()
	for cnode, allocs := range byNode {
		knode, ok := w.k8sNodeOf(cnode)
		if !ok {
			continue // not a Kubernetes node
		}
		gone := knode == "" || !w.k8sNodes[knode]
		canDelete, tunnels := true, []leak(nil)
		for _, a := range allocs {
			switch {
			case a.handle == windowsReserved:
			case !a.isPod() && !a.isTunnel():
				canDelete = false
			case a.isTunnel():
				tunnels = append(tunnels, leak{a, knode})
			case valid(a, knode, cached):
				canDelete = false
				delete(s.leaks, a.id())
			case gone:
				confirmed = append(confirmed, leak{a, knode})
			default:
				if s.candidate(a, now) {
					confirmed = append(confirmed, leak{a, knode})
				}
			}
		}
		if gone && canDelete {
			confirmed = append(confirmed, tunnels...)
			release = append(release, cnode)
		}
	}
	return confirmed, release
}

// candidate marks a leak candidate and says whether it is confirmed.
func (s *simulator) candidate(a allocation, now time.Time) bool {
	first, ok := s.leaks[a.id()]
	if !ok {
		s.leaks[a.id()] = now
		s.log.Info("candidate IP leak", "ip", a.ip, "handle", a.handle, "node", a.node(), "pod", a.attrs[attrNamespace]+"/"+a.attrs[attrPod])
		return false
	}
	return s.opt.LeakGrace > 0 && now.Sub(first) > s.opt.LeakGrace
}

// lookup finds pods in the round's listing, as the informer cache does.
func (w *world) lookup() podLookup {
	return func(ns, name string) (*corev1.Pod, bool, error) {
		p, ok := w.pods[ns+"/"+name]
		return p, ok, nil
	}
}

// live finds pods with a GET from the API server.
func (s *simulator) live(ctx context.Context) podLookup {
	return func(ns, name string) (*corev1.Pod, bool, error) {
		p, err := s.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		return p, err == nil, err
	}
}

// collectLeaks is garbageCollectKnownLeaks: each confirmed leak is checked
// once more (against the API server unless its node is gone), released
// only when every allocation of its handle is a confirmed leak too, and
// released by address, handle and sequence number, so that an address
// re-allocated in between is left alone.
func (s *simulator) collectLeaks(ctx context.Context, w *world, confirmed []leak) error {
	byHandle := map[string]int{}
	for _, a := range w.allocs {
		byHandle[a.handle]++
	}
	for _, l := range confirmed {
		byHandle[l.handle]--
	}
	var opts []releaseOpt
	for _, l := range confirmed {
		lookup := s.live(ctx)
		if l.knode == "" {
			lookup = w.lookup()
		}
		if valid(l.allocation, l.knode, lookup) {
			s.log.Info("leaked IP has been resurrected after querying latest state", "ip", l.ip, "handle", l.handle)
			delete(s.leaks, l.id())
			byHandle[l.handle]++
			continue
		}
		if byHandle[l.handle] > 0 {
			continue // some address of the handle is still valid
		}
		seq := l.seq
		opts = append(opts, releaseOpt{ip: l.ip, block: l.block, handle: l.handle, seq: &seq})
	}
	if len(opts) == 0 {
		return nil
	}
	for _, o := range opts {
		s.log.Info("garbage collecting leaked IP address", "ip", o.ip, "handle", o.handle)
	}
	if err := releaseIPs(ctx, s.store, s.log, opts); err != nil {
		return fmt.Errorf("releasing leaked addresses: %w", err)
	}
	return nil
}

// releaseUnusedBlocks releases the affinity of a block that has stayed
// empty for longer than LeakGrace, when its node holds another block.
func (s *simulator) releaseUnusedBlocks(ctx context.Context, w *world) error {
	for cidr := range s.empty {
		if !w.empty[cidr] {
			delete(s.empty, cidr) // in use again, or gone
		}
	}
	for cidr, isEmpty := range w.empty {
		node := w.affine[cidr]
		if !isEmpty || w.blocksOf(node) <= 1 || s.opt.LeakGrace <= 0 {
			continue
		}
		if _, ok := w.k8sNodeOf(node); !ok {
			delete(s.empty, cidr) // the flannel-migration check fails for a non-Kubernetes node
			continue
		}
		first, ok := s.empty[cidr]
		if !ok {
			s.empty[cidr] = time.Now()
			continue
		}
		if time.Since(first) <= s.opt.LeakGrace {
			continue
		}
		s.log.Info("releasing affinity for empty block", "block", cidr, "node", node)
		if err := releaseBlockAffinity(ctx, s.store, node, cidr, true); err != nil {
			s.log.Warn("unable or unwilling to release affinity for block", "block", cidr, "err", err)
			continue
		}
		delete(s.empty, cidr)
		w.forget(cidr)
	}
	return nil
}

// forget drops a block whose affinity was released.
func (w *world) forget(cidr netip.Prefix) {
	delete(w.affine, cidr)
	delete(w.empty, cidr)
}
