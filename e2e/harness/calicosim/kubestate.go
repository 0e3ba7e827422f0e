package calicosim

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// KubeState reads Calico's IPAM objects from the Kubernetes datastore. The
// lists are separate reads, not one consistent snapshot, so Revision is 0;
// take it while nothing allocates. Handles are keyed by spec.handleID, the
// ID in its original case. Objects marked deleted are left out, as Calico
// treats them, but not deleted: reading changes nothing.
func KubeState(ctx context.Context, cfg *rest.Config) (*Snapshot, error) {
	dyn, err := newDynamic(cfg)
	if err != nil {
		return nil, err
	}
	c := kubeClient{dyn: dyn, readOnly: true}
	s := &Snapshot{Handles: map[string]calico.Handle{}}
	for _, step := range []struct {
		k   kind
		add func(*kubeObject) error
	}{{kindBlock, s.addKubeBlock}, {kindHandle, s.addKubeHandle}, {kindAffinity, s.addKubeAffinity}} {
		objs, err := c.list(ctx, step.k, "")
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if err := step.add(o); err != nil {
				return nil, err
			}
		}
	}
	sortBlocks(s.Blocks)
	return s, nil
}

func (s *Snapshot) addKubeBlock(o *kubeObject) error {
	ref, err := blockFromObject(o)
	if err != nil {
		return err
	}
	bs, err := describeBlock(*ref.block)
	if err != nil {
		return fmt.Errorf("IPAMBlock(%s): %w", o.Metadata.Name, err)
	}
	s.Blocks = append(s.Blocks, bs)
	return nil
}

func (s *Snapshot) addKubeHandle(o *kubeObject) error {
	var spec calico.IPAMHandleSpec
	if err := o.decodeSpec(&spec); err != nil {
		return err
	}
	s.Handles[spec.HandleID] = *spec.Handle()
	return nil
}

func (s *Snapshot) addKubeAffinity(o *kubeObject) error {
	var spec calico.BlockAffinitySpec
	if err := o.decodeSpec(&spec); err != nil {
		return err
	}
	node, cidr, aff, err := spec.Affinity()
	if err != nil {
		return fmt.Errorf("BlockAffinity(%s): %w", o.Metadata.Name, err)
	}
	s.Affinities = append(s.Affinities, AffinityState{Node: node, Block: cidr, Affinity: aff})
	return nil
}
