package chaos

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// A history on Calico's Kubernetes datastore (ClaimsStore) keeps Calico's
// data in a real kube-apiserver, which also serves safe-ipam's
// AddressClaims (deploy/safe-ipam-claims.yaml); each node's records are in
// its file store. A cluster starts its API server at its first such
// history, and an outage stops it (SIGSTOP: requests hang, as behind a
// partition or a stalled server, until their deadlines).

// kubeAPI is a cluster's API server and its clients.
type kubeAPI struct {
	srv    *kubetest.Server
	dyn    dynamic.Interface
	claims *claims.Client
}

// The Calico objects a history leaves, which Reset deletes, and the claims.
var kubeLeftovers = []schema.GroupVersionResource{
	{Group: calico.KDDGroup, Version: calico.KDDVersion, Resource: calico.PluralIPAMBlocks},
	{Group: calico.KDDGroup, Version: calico.KDDVersion, Resource: calico.PluralIPAMHandles},
	{Group: calico.KDDGroup, Version: calico.KDDVersion, Resource: calico.PluralBlockAffinities},
	{Group: claims.Group, Version: claims.Version, Resource: claims.Resource},
}

// startKube starts the cluster's API server once, with Calico's IPAM CRDs,
// the claims' manifest, the pools and the nodes.
func (c *Cluster) startKube(ctx context.Context) error {
	if c.kube != nil {
		return nil
	}
	root, err := ModuleRoot(ctx)
	if err != nil {
		return err
	}
	srv, err := kubetest.New(filepath.Join(c.dir, "kube"))
	if err != nil {
		return err
	}
	k := &kubeAPI{srv: srv}
	if err := k.seed(ctx, filepath.Join(root, "deploy", "safe-ipam-claims.yaml")); err != nil {
		srv.Close()
		return err
	}
	c.kube = k
	return nil
}

func (k *kubeAPI) seed(ctx context.Context, manifest string) error {
	ctx, cancel := context.WithTimeout(ctx, hangLimit)
	defer cancel()
	cfg := k.srv.Config()
	if err := calicosim.InstallKubeCRDs(ctx, cfg, calicodata.Path(calicodata.CRDs)); err != nil {
		return err
	}
	if err := k.srv.Apply(manifest); err != nil {
		return err
	}
	// calico-ipam looks up the pod's namespace.
	if err := k.srv.Namespace(Namespace); err != nil {
		return err
	}
	for _, p := range pools {
		if err := calicosim.SeedKubeIPPool(ctx, cfg, p.Name, p.CIDR, p.BlockSize); err != nil {
			return err
		}
	}
	var err error
	if k.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return err
	}
	api, err := kubeapi.New(k.srv.Kubeconfig, normalTimeout)
	if err != nil {
		return err
	}
	k.claims = claims.NewClient(api)
	return k.seedNodes(ctx)
}

func (k *kubeAPI) seedNodes(ctx context.Context) error {
	for _, n := range Nodes {
		if err := calicosim.SeedKubeNode(ctx, k.srv.Config(), n); err != nil {
			return err
		}
	}
	return nil
}

// reset deletes what a history left: Calico's IPAM objects and the claims;
// the nodes a history took away come back.
func (k *kubeAPI) reset(ctx context.Context) error {
	if err := k.resume(); err != nil { // a failed history may have left it stopped
		return err
	}
	for _, gvr := range kubeLeftovers {
		if err := k.dyn.Resource(gvr).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return fmt.Errorf("clearing %s: %w", gvr.Resource, err)
		}
	}
	return k.seedNodes(ctx)
}

// pause stops the API server: every request to it hangs.
func (k *kubeAPI) pause() error { return k.signal(syscall.SIGSTOP) }

func (k *kubeAPI) resume() error { return k.signal(syscall.SIGCONT) }

func (k *kubeAPI) signal(sig syscall.Signal) error {
	if err := syscall.Kill(k.srv.PID(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kube-apiserver: %v: %w", sig, err)
	}
	return nil
}

func (k *kubeAPI) close() {
	_ = k.resume()
	k.claims.Close()
	k.srv.Close()
}

// netConf gives Calico's config the Kubernetes datastore.
func (k *kubeAPI) netConf(conf map[string]any) {
	delete(conf, "etcd_endpoints")
	conf["datastore_type"] = "kubernetes"
	conf["kubernetes"] = map[string]any{"kubeconfig": k.srv.Kubeconfig}
}

// state reads Calico's data and the claims.
func (k *kubeAPI) state(ctx context.Context) (*calicosim.Snapshot, []*claims.Claim, error) {
	snap, err := calicosim.KubeState(ctx, k.srv.Config())
	if err != nil {
		return nil, nil, err
	}
	cls, damaged, err := k.claims.All(ctx, Network)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the claims: %w", err)
	}
	if len(damaged) > 0 {
		return nil, nil, fmt.Errorf("claims that do not read: %v", damaged)
	}
	return snap, cls, nil
}

// allocator is Calico's allocator on node, as kube-controllers and
// calicoctl write Calico's data.
func (c *Cluster) allocator(node string) *calicosim.Allocator {
	if c.setup.Kube() {
		return &calicosim.Allocator{Kube: c.kube.dyn, Node: node}
	}
	return &calicosim.Allocator{Client: c.cli, Node: node}
}

// calicoState reads Calico's data, from etcd or the API server.
func (c *Cluster) calicoState(ctx context.Context) (*calicosim.Snapshot, error) {
	if c.setup.Kube() {
		snap, _, err := c.kube.state(ctx)
		return snap, err
	}
	return calicosim.State(ctx, c.cli)
}

// moveAffinity gives node to the blocks affine to node from.
func (c *Cluster) moveAffinity(ctx context.Context, from, to string) error {
	if !c.setup.Kube() {
		return errors.New("a block's affinity moves on the Kubernetes datastore only")
	}
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	snap, err := c.calicoState(ctx)
	if err != nil {
		return err
	}
	for _, aff := range snap.Affinities {
		if aff.Node != from {
			continue
		}
		if err := calicosim.MoveKubeAffinity(ctx, c.kube.srv.Config(), aff.Block, from, to); err != nil {
			return err
		}
	}
	return nil
}
