// Package lookup reads Calico's data as the CNI binary needs it, the way
// calico-ipam reaches it. Only rare paths of the verbs read Calico (a
// KubeVirt VM's pod, fencing a holder on another node, an adopted
// pod-name handle), so a Reader connects on the first read and not
// before: an ordinary pod's verbs dial nothing. This package reads the
// Kubernetes datastore through kubeapi (never client-go, whose package
// init every CNI call would pay); package etcdlookup reads Calico's etcd,
// and only the builds that link the etcd client have it.
package lookup

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
)

// Timeout bounds connecting, and each read: a verb must not spend its
// deadline waiting on Calico for what only narrows its choice.
const Timeout = 5 * time.Second

// Reader is Calico's datastore as one invocation reads it. Close it when
// the invocation ends.
type Reader interface {
	guard.CalicoData
	Close() error
}

// Warn is told how a transport a Reader connects over is exposed (plain
// text, a certificate not checked against the cluster's CA), as the
// record store's is; nil tells nobody.
type Warn func(transport, why string)

func (w Warn) orNobody() Warn {
	if w == nil {
		return func(string, string) {}
	}
	return w
}

// Kubernetes reads Calico's Kubernetes datastore, connected on the first
// read.
type Kubernetes struct {
	conf config.CalicoSettings
	kube *kubeapi.Client
	warn Warn
}

// New is Calico's Kubernetes datastore as the config's top-level keys
// name it; it connects to nothing yet.
func New(c config.CalicoSettings, warn Warn) *Kubernetes {
	return &Kubernetes{conf: c, warn: warn.orNobody()}
}

// Close closes nothing: the Kubernetes reads hold no connection open.
func (c *Kubernetes) Close() error { return nil }

// NodeKnown is an error: the CNI binary reads no Node from the Kubernetes
// datastore, which a caller takes as doubt.
func (c *Kubernetes) NodeKnown(context.Context, string) (bool, error) {
	return false, c.unread()
}

// HandleAllocations is an error, as NodeKnown.
func (c *Kubernetes) HandleAllocations(context.Context, string) (map[netip.Addr]guard.Allocation, error) {
	return nil, c.unread()
}

func (c *Kubernetes) unread() error {
	return errors.New("Calico's datastore is " + c.conf.Datastore() + ", which the CNI binary does not read")
}

// Allocation reads what Calico records of ip; a zero Allocation when ip
// is not allocated.
func (c *Kubernetes) Allocation(ctx context.Context, ip netip.Addr) (guard.Allocation, error) {
	if c.conf.Datastore() != config.DatastoreKubernetes {
		return guard.Allocation{}, c.unread()
	}
	kube, err := c.kubeClient()
	if err != nil {
		return guard.Allocation{}, err
	}
	a, ok, err := calico.KDDAllocationAttribute(ctx, kube.Get, kubeapi.ErrNotFound, ip)
	if err != nil || !ok {
		return guard.Allocation{}, err
	}
	return AllocationOf(a), nil
}

// AllocationOf is what the verbs judge of an allocation's attribute.
func AllocationOf(a calico.Attribute) guard.Allocation {
	return guard.Allocation{Handle: a.Handle(), Owner: a.Secondary, Alternate: a.Alternate()}
}

// kubeClient reads kubernetes.kubeconfig for the API server calico-ipam
// reaches, once; it holds no connection open.
func (c *Kubernetes) kubeClient() (*kubeapi.Client, error) {
	if c.kube != nil {
		return c.kube, nil
	}
	kube, err := kubeapi.New(c.conf.Kubeconfig, Timeout)
	if err != nil {
		return nil, err
	}
	c.warn("the Kubernetes API", kube.Exposure())
	c.kube = kube
	return kube, nil
}

// Unavailable is a Reader whose every read fails with why.
func Unavailable(why string) Reader { return unavailable(why) }

type unavailable string

func (u unavailable) Close() error { return nil }
func (u unavailable) NodeKnown(context.Context, string) (bool, error) {
	return false, errors.New(string(u))
}
func (u unavailable) Allocation(context.Context, netip.Addr) (guard.Allocation, error) {
	return guard.Allocation{}, errors.New(string(u))
}
func (u unavailable) HandleAllocations(context.Context, string) (map[netip.Addr]guard.Allocation, error) {
	return nil, errors.New(string(u))
}
