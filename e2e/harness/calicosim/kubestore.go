package calicosim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// ErrNoQualifiedPool is calico-ipam's failure on the Kubernetes datastore
// when no IPPool (or no ippools resource) is there.
var ErrNoQualifiedPool = errors.New("cannot find a qualified ippool")

// handleCreateAttempts bounds the retries of a handle create the
// apiserver refuses as an unknown resource. calico-ipam retries until its
// 90 s deadline; a bounded retry fails the same way, sooner.
const handleCreateAttempts = 5

// kubeStore keeps IPAM data in the Kubernetes datastore (KDD). Unlike
// etcd there are no multi-object transactions, so it writes in Calico's
// order, each write guarded by a resourceVersion: the handle is counted
// before the block takes the address (and uncounted if the block write
// loses), and a release frees the block before it uncounts the handle.
type kubeStore struct {
	dyn dynamic.Interface
	log *slog.Logger
}

func (s *kubeStore) client() kubeClient { return kubeClient{dyn: s.dyn} }

// checkNode looks up the pod's namespace (pools can select namespaces)
// and the node, with calico-ipam's error texts.
func (s *kubeStore) checkNode(ctx context.Context, node, namespace string) error {
	if namespace == "" {
		namespace = "default"
	}
	if _, err := s.dyn.Resource(kindNamespace.gvr).Get(ctx, namespace, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("failed to get namespace %s: %w", namespace, err)
	}
	if _, err := s.dyn.Resource(kindNode.gvr).Get(ctx, node, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("resource does not exist: Node(%s) with error: %w", node, err)
		}
		return fmt.Errorf("reading Node(%s): %w", node, err)
	}
	return nil
}

func (s *kubeStore) ipPools(ctx context.Context) ([]calico.IPPool, error) {
	objs, err := s.client().list(ctx, kindPool, "")
	if err != nil {
		return nil, err
	}
	pools := make([]calico.IPPool, 0, len(objs))
	for _, o := range objs {
		p := calico.IPPool{Kind: calico.KindIPPool, APIVersion: o.APIVersion, Metadata: calico.ObjectMeta{Name: o.Metadata.Name}}
		if err := o.decodeSpec(&p.Spec); err != nil {
			return nil, err
		}
		pools = append(pools, p)
	}
	if len(pools) == 0 {
		return nil, ErrNoQualifiedPool
	}
	slices.SortFunc(pools, func(x, y calico.IPPool) int { return strings.Compare(x.Metadata.Name, y.Metadata.Name) })
	return pools, nil
}

// affineBlocks lists the node's affinities by their labels, as Calico
// does; the spec's node guards against a hash collision.
func (s *kubeStore) affineBlocks(ctx context.Context, node string, fam calico.Family) ([]netip.Prefix, error) {
	sel := labels.SelectorFromSet(labels.Set{
		calico.LabelHostnameHash: calico.HostnameHash(node),
		calico.LabelIPVersion:    strconv.Itoa(int(fam)),
	})
	objs, err := s.client().list(ctx, kindAffinity, sel.String())
	if err != nil {
		return nil, err
	}
	var cidrs []netip.Prefix
	for _, o := range objs {
		var spec calico.BlockAffinitySpec
		if err := o.decodeSpec(&spec); err != nil {
			return nil, err
		}
		n, cidr, aff, err := spec.Affinity()
		if err != nil {
			s.log.Warn("skipping affinity", "name", o.Metadata.Name, "error", err)
			continue
		}
		if n == node && aff.State == calico.AffinityConfirmed {
			cidrs = append(cidrs, cidr)
		}
	}
	sortPrefixes(cidrs)
	return cidrs, nil
}

func (s *kubeStore) blocks(ctx context.Context, fam calico.Family) ([]netip.Prefix, error) {
	objs, err := s.client().list(ctx, kindBlock, "")
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, o := range objs {
		ref, err := blockFromObject(o)
		if err != nil {
			return nil, err
		}
		if calico.FamilyOf(ref.block.CIDR.Addr()) == fam {
			out = append(out, ref.block.CIDR)
		}
	}
	return out, nil
}

func blockFromObject(o *kubeObject) (*blockRef, error) {
	var spec calico.IPAMBlockSpec
	if err := o.decodeSpec(&spec); err != nil {
		return nil, err
	}
	blk, err := spec.Block()
	if err != nil {
		return nil, fmt.Errorf("IPAMBlock(%s): %w", o.Metadata.Name, err)
	}
	return &blockRef{block: blk, obj: o}, nil
}

func (s *kubeStore) readBlock(ctx context.Context, cidr netip.Prefix) (*blockRef, error) {
	o, err := s.client().get(ctx, kindBlock, calico.BlockName(cidr))
	if err != nil || o == nil {
		return nil, err
	}
	return blockFromObject(o)
}

// claim writes in Calico's order: a pending affinity, the block, then the
// affinity confirmed. A failure in between leaves the affinity pending,
// as calico-ipam does.
func (s *kubeStore) claim(ctx context.Context, node string, blk *calico.Block) (*blockRef, error) {
	affName := calico.AffinityName(node, blk.CIDR)
	if err := s.claimPending(ctx, node, blk.CIDR); err != nil {
		return nil, err
	}
	o, err := newKubeObject(kindBlock, calico.BlockName(blk.CIDR), nil, calico.NewIPAMBlockSpec(blk))
	if err != nil {
		return nil, err
	}
	if o, err = s.client().create(ctx, kindBlock, o); err != nil {
		return nil, err
	}
	_, err = s.client().modify(ctx, kindAffinity, affName, func(a *kubeObject) (*kubeObject, error) {
		if a == nil {
			return nil, fmt.Errorf("BlockAffinity(%s) vanished while claiming its block", affName)
		}
		return a.withSpec(calico.NewBlockAffinitySpec(node, blk.CIDR, calico.ConfirmedAffinity()))
	})
	if err != nil {
		return nil, err
	}
	return &blockRef{block: blk, obj: o}, nil
}

// claimPending creates node's pending affinity to cidr unless the node
// already has one.
func (s *kubeStore) claimPending(ctx context.Context, node string, cidr netip.Prefix) error {
	name := calico.AffinityName(node, cidr)
	have, err := s.client().get(ctx, kindAffinity, name)
	if err != nil || have != nil {
		return err
	}
	pending := calico.Affinity{State: calico.AffinityPending}
	o, err := newKubeObject(kindAffinity, name, calico.AffinityLabels(node, cidr), calico.NewBlockAffinitySpec(node, cidr, pending))
	if err != nil {
		return err
	}
	_, err = s.client().create(ctx, kindAffinity, o)
	return err
}

// commitAllocation counts the address in the handle first, then writes
// the block; if the block write loses, the count is taken back.
func (s *kubeStore) commitAllocation(ctx context.Context, ref *blockRef, handle string) error {
	if err := s.countInHandle(ctx, handle, ref.block.CIDR); err != nil {
		return err
	}
	err := s.writeBlock(ctx, ref)
	if errors.Is(err, errConflict) {
		h, rerr := s.readHandle(ctx, handle)
		if rerr == nil {
			rerr = s.uncount(ctx, h, func(h *calico.Handle) { h.Remove(ref.block.CIDR, 1) })
		}
		return errors.Join(err, rerr)
	}
	return err
}

func (s *kubeStore) writeBlock(ctx context.Context, ref *blockRef) error {
	o, err := ref.obj.withSpec(calico.NewIPAMBlockSpec(ref.block))
	if err != nil {
		return err
	}
	ref.obj, err = s.client().update(ctx, kindBlock, o)
	return err
}

// countInHandle adds one address in block to the handle, creating it.
func (s *kubeStore) countInHandle(ctx context.Context, handle string, block netip.Prefix) error {
	if err := calico.ValidateObjectName(calico.HandleName(handle)); err != nil {
		return fmt.Errorf("handle %s cannot be stored: %w", handle, err)
	}
	for missing := 0; ; {
		h, err := s.readHandle(ctx, handle)
		if err != nil {
			return err
		}
		err = s.writeCount(ctx, h, block)
		var notServed *resourceMissing
		if errors.As(err, &notServed) && missing+1 < handleCreateAttempts {
			missing++
			s.log.Warn("failed to create handle, retrying", "handle", handle, "error", err)
		} else if !errors.Is(err, errConflict) {
			return err
		}
		if err := pause(ctx, time.Duration(missing)*100*time.Millisecond); err != nil {
			return err
		}
	}
}

// writeCount adds one address in block to the handle as read: an update
// guarded by its version, or a create when it did not exist.
func (s *kubeStore) writeCount(ctx context.Context, h *handleRef, block netip.Prefix) error {
	if h.handle == nil {
		fresh := calico.NewHandle()
		fresh.Add(block, 1)
		o, err := newKubeObject(kindHandle, calico.HandleName(h.id), nil, calico.NewIPAMHandleSpec(h.id, fresh))
		if err != nil {
			return err
		}
		_, err = s.client().create(ctx, kindHandle, o)
		return err
	}
	h.handle.Add(block, 1)
	o, err := h.obj.withSpec(calico.NewIPAMHandleSpec(h.id, h.handle))
	if err != nil {
		return err
	}
	_, err = s.client().update(ctx, kindHandle, o)
	return err
}

// readHandle reads the handle object of handle. Its ID is spec.handleID,
// in its original case: the name is lowercased.
func (s *kubeStore) readHandle(ctx context.Context, handle string) (*handleRef, error) {
	o, err := s.client().get(ctx, kindHandle, calico.HandleName(handle))
	if err != nil || o == nil {
		return &handleRef{id: handle}, err
	}
	var spec calico.IPAMHandleSpec
	if err := o.decodeSpec(&spec); err != nil {
		return nil, err
	}
	return &handleRef{id: handle, handle: spec.Handle(), obj: o}, nil
}

// commitRelease frees the addresses in the blocks first, then uncounts
// them in the handle.
func (s *kubeStore) commitRelease(ctx context.Context, h *handleRef, changed []*blockRef, update func(*calico.Handle)) error {
	for _, ref := range changed {
		if err := s.writeBlock(ctx, ref); err != nil {
			return err
		}
	}
	return s.uncount(ctx, h, update)
}

// uncount applies update to the handle until the write wins, re-reading
// it after a lost race, and deletes it once it holds nothing.
func (s *kubeStore) uncount(ctx context.Context, h *handleRef, update func(*calico.Handle)) error {
	for h.handle != nil {
		update(h.handle)
		err := s.writeUncount(ctx, h)
		if !errors.Is(err, errConflict) {
			return err
		}
		if h, err = s.readHandle(ctx, h.id); err != nil {
			return err
		}
	}
	return nil
}

func (s *kubeStore) writeUncount(ctx context.Context, h *handleRef) error {
	if h.handle.Empty() {
		mark := calico.NewIPAMHandleSpec(h.id, h.handle)
		mark.Deleted = true
		return s.client().remove(ctx, kindHandle, h.obj, mark)
	}
	o, err := h.obj.withSpec(calico.NewIPAMHandleSpec(h.id, h.handle))
	if err != nil {
		return err
	}
	_, err = s.client().update(ctx, kindHandle, o)
	return err
}
