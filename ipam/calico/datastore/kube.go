package datastore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/kubeconfig"
)

// DefaultKubeTimeout bounds one request to the API server: one that does
// not answer is unreadable, never empty.
const DefaultKubeTimeout = 30 * time.Second

// A repair reads and writes a few objects per action, and detect pages
// through every pod; client-go's default of 5 requests a second would
// make either run past its time limit. These match what a calico-ipam per
// node may use.
const (
	KubeQPS   = float32(50)
	KubeBurst = 100
)

// Calico's KDD IPAM resources.
var (
	blocksGVR     = calicoGVR(calico.PluralIPAMBlocks)
	handlesGVR    = calicoGVR(calico.PluralIPAMHandles)
	affinitiesGVR = calicoGVR(calico.PluralBlockAffinities)
)

func calicoGVR(plural string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: calico.KDDGroup, Version: calico.KDDVersion, Resource: plural}
}

// KubeStore is Calico's Kubernetes datastore (KDD): cluster-scoped
// crd.projectcalico.org/v1 objects, each written with an Update guarded
// by its resourceVersion. There is no multi-object transaction, so a
// Change is written one object at a time in calico-ipam's order (see
// Change.HandleFirst).
type KubeStore struct {
	Client dynamic.Interface
	// lists reads the scans' list pages (kubelist.go).
	lists rest.Interface
	// Host names the API server in messages.
	Host string
	// PageSize is the objects per list page; 0 means 2000.
	PageSize int64
}

// NewKube reaches the API server the kubeconfig at path names; every request is
// bounded by timeout (0: DefaultKubeTimeout).
func NewKube(path string, timeout time.Duration) (*KubeStore, error) {
	cfg, err := kubeconfig.Load(path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %w", err)
	}
	if timeout <= 0 {
		timeout = DefaultKubeTimeout
	}
	cfg.Timeout = timeout
	cfg.QPS, cfg.Burst = KubeQPS, KubeBurst
	return NewKubeForConfig(cfg)
}

// NewKubeForConfig is NewKube with a client config.
func NewKubeForConfig(cfg *rest.Config) (*KubeStore, error) {
	if cfg.RateLimiter == nil && cfg.QPS >= 0 {
		// One limit for both clients, as for one.
		cfg = rest.CopyConfig(cfg)
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cmp.Or(cfg.QPS, rest.DefaultQPS), cmp.Or(cfg.Burst, rest.DefaultBurst))
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("Kubernetes API %s: %w", cfg.Host, err)
	}
	lists, err := listClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("Kubernetes API %s: %w", cfg.Host, err)
	}
	return &KubeStore{Client: dyn, lists: lists, Host: cfg.Host}, nil
}

// Kind implements Datastore.
func (k *KubeStore) Kind() string { return Kubernetes }

// Close implements Datastore.
func (k *KubeStore) Close() error { return nil }

// Scan implements Datastore. Blocks are listed first, at the current
// resourceVersion; handles and affinities are then listed at exactly that
// resourceVersion, so the three lists are one moment, as one etcd
// revision is. Pages follow continue tokens, which keep the list's
// resourceVersion; a token that expired (410) fails the scan rather than
// mix two moments.
func (k *KubeStore) Scan(ctx context.Context, v Visitor) (Point, error) {
	if err := v.check(); err != nil {
		return Point{}, err
	}
	rv, err := k.list(ctx, blocksGVR, "", func(o *object) error { return visitBlock(o, v) }, v)
	if err != nil {
		return Point{}, err
	}
	if v.blocksOnly() {
		return Point{ResourceVersion: rv}, nil
	}
	if _, err := k.list(ctx, handlesGVR, rv, func(o *object) error { return visitHandle(o, v) }, v); err != nil {
		return Point{}, err
	}
	if _, err := k.list(ctx, affinitiesGVR, rv, func(o *object) error { return visitAffinity(o, v) }, v); err != nil {
		return Point{}, err
	}
	return Point{ResourceVersion: rv}, nil
}

// list pages through one resource, at exactly rv when it is set, and
// returns the list's resourceVersion.
func (k *KubeStore) list(ctx context.Context, gvr schema.GroupVersionResource, rv string, visit func(*object) error, v Visitor) (string, error) {
	opts := metav1.ListOptions{Limit: k.pageSize()}
	if rv != "" {
		opts.ResourceVersion, opts.ResourceVersionMatch = rv, metav1.ResourceVersionMatchExact
	}
	for {
		page, err := k.page(ctx, gvr, opts, func(o *object) {
			if err := visit(o); err != nil {
				v.Undecodable(gvr.Resource+"/"+o.Metadata.Name, err)
			}
		})
		if err != nil {
			return "", err
		}
		if page.ResourceVersion == "" {
			return "", fmt.Errorf("Kubernetes API %s: the list of %s carries no resourceVersion: not a complete answer", k.Host, gvr.Resource)
		}
		if rv == "" {
			rv = page.ResourceVersion
		}
		if page.Continue == "" {
			return rv, nil
		}
		// The token carries the list's resourceVersion; the two must not
		// both be set.
		opts = metav1.ListOptions{Limit: k.pageSize(), Continue: page.Continue}
	}
}

func (k *KubeStore) pageSize() int64 {
	if k.PageSize > 0 {
		return k.PageSize
	}
	return pageSize
}

// explain names what a failed request means for the operator.
func (k *KubeStore) explain(doing string, gvr schema.GroupVersionResource, err error) error {
	what := gvr.Resource + "." + gvr.Group
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("Kubernetes API %s: %s %s: not served: is Calico's Kubernetes datastore (its crd.projectcalico.org CRDs) installed? %w", k.Host, doing, what, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("Kubernetes API %s: %s %s: forbidden: bind the ClusterRole of deploy/safe-ipam-rbac.yaml (deploy/safe-ipam-detect.yaml for detect) to the kubeconfig's identity: %w", k.Host, doing, what, err)
	case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
		return fmt.Errorf("Kubernetes API %s: %s %s: the list expired before its last page (compacted); re-run: pages of two moments would not be one view: %w", k.Host, doing, what, err)
	}
	return fmt.Errorf("Kubernetes API %s: %s %s: %w", k.Host, doing, what, err)
}

// spec decodes obj's spec into dst.
func spec(obj *unstructured.Unstructured, dst any) error {
	raw, err := json.Marshal(obj.Object["spec"])
	if err != nil {
		return err
	}
	return decodeSpec(raw, dst)
}

func decodeSpec(raw json.RawMessage, dst any) error {
	if len(raw) == 0 {
		return nil // no spec: as null, a zero spec
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	return nil
}

func decodeBlock(obj *unstructured.Unstructured) (*calico.Block, error) {
	var s calico.IPAMBlockSpec
	if err := spec(obj, &s); err != nil {
		return nil, err
	}
	return blockNamed(obj.GetName(), &s)
}

// blockNamed is the block s holds, stored as name.
func blockNamed(name string, s *calico.IPAMBlockSpec) (*calico.Block, error) {
	b, err := s.Block()
	if err != nil {
		return nil, err
	}
	if want := calico.BlockName(b.CIDR); name != want {
		return nil, fmt.Errorf("block %s is stored as %q, not %q", b.CIDR, name, want)
	}
	return b, nil
}

// visitBlock hands v a block; one marked deleted (the first half of
// Calico's delete) is absent.
func visitBlock(o *object, v Visitor) error {
	var s calico.IPAMBlockSpec
	if err := decodeSpec(o.Spec, &s); err != nil {
		return err
	}
	b, err := blockNamed(o.Metadata.Name, &s)
	if err != nil || b.Deleted {
		return err
	}
	v.Block(b)
	return nil
}

func visitHandle(o *object, v Visitor) error {
	var s calico.IPAMHandleSpec
	if err := decodeSpec(o.Spec, &s); err != nil || s.Deleted {
		return err
	}
	counts, err := json.Marshal(s.Block)
	if err != nil {
		return err
	}
	v.Handle(handleID(o.Metadata.Name, &s), counts, Version(o.Metadata.ResourceVersion))
	return nil
}

// handleID is spec.handleID, which keeps the ID's case; the object's name
// is its lowercase form, for an object written without one.
func handleID(name string, s *calico.IPAMHandleSpec) string {
	if s.HandleID != "" {
		return s.HandleID
	}
	return name
}

func visitAffinity(o *object, v Visitor) error {
	var s calico.BlockAffinitySpec
	if err := decodeSpec(o.Spec, &s); err != nil {
		return err
	}
	node, cidr, a, err := s.Affinity()
	if err != nil || a.Deleted {
		return err
	}
	v.Affinity(node, cidr)
	return nil
}

// Block implements Datastore.
func (k *KubeStore) Block(ctx context.Context, cidr netip.Prefix) (*Block, error) {
	obj, err := k.get(ctx, blocksGVR, calico.BlockName(cidr))
	if obj == nil || err != nil {
		return nil, err
	}
	b, err := decodeBlock(obj)
	if err != nil {
		return nil, fmt.Errorf("decoding block %s: %w", cidr, err)
	}
	if b.Deleted {
		return nil, k.finishDelete(ctx, blocksGVR, obj)
	}
	doc, err := obj.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return &Block{Block: b, Version: Version(obj.GetResourceVersion()), doc: doc}, nil
}

// Handle implements Datastore. IDs that differ only in case share one
// object, as they do for calico-ipam.
func (k *KubeStore) Handle(ctx context.Context, id string) (*Handle, error) {
	obj, err := k.get(ctx, handlesGVR, calico.HandleName(id))
	if obj == nil || err != nil {
		return nil, err
	}
	var s calico.IPAMHandleSpec
	if err := spec(obj, &s); err != nil {
		return nil, fmt.Errorf("decoding handle %s: %w", id, err)
	}
	if s.Deleted {
		return nil, k.finishDelete(ctx, handlesGVR, obj)
	}
	doc, err := obj.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return &Handle{ID: handleID(obj.GetName(), &s), Handle: s.Handle(), Version: Version(obj.GetResourceVersion()), doc: doc}, nil
}

// get reads one object; nil when it does not exist.
func (k *KubeStore) get(ctx context.Context, gvr schema.GroupVersionResource, name string) (*unstructured.Unstructured, error) {
	obj, err := k.Client.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) && !missingResource(err) {
		return nil, nil
	}
	if err != nil {
		return nil, k.explain("reading "+name+" of", gvr, err)
	}
	return obj, nil
}

// missingResource tells a 404 for the resource itself (no CRD) from one
// for an object that does not exist: the first is an error, never
// "absent".
func missingResource(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d == nil || d.Name == ""
}

// gvrNodes are the Kubernetes Nodes, which are Calico's Nodes on the
// Kubernetes datastore.
var gvrNodes = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// NodeExists implements Datastore: the Kubernetes Node.
func (k *KubeStore) NodeExists(ctx context.Context, name string) (bool, error) {
	_, err := k.Client.Resource(gvrNodes).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err):
		return false, nil
	}
	return false, k.explain("reading Node "+name, gvrNodes, err)
}

// Nodes implements Datastore: the Kubernetes Nodes, listed page by page
// at one resourceVersion.
func (k *KubeStore) Nodes(ctx context.Context) ([]string, error) {
	var names []string
	_, err := k.list(ctx, gvrNodes, "", func(o *object) error {
		names = append(names, o.Metadata.Name)
		return nil
	}, Visitor{Undecodable: func(string, error) {}})
	if err != nil {
		return nil, err
	}
	return names, nil
}
