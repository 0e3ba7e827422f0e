package scale

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// kubeCluster is Calico's Kubernetes datastore (KDD): a real
// kube-apiserver holding Calico's IPAM CRDs, the Kubernetes Nodes and
// deploy/safe-ipam-claims.yaml. safe-ipam's records live on each node
// (the file store, as the plugin infers it there), so only the simulated
// nodes have any; every node's pods have their AddressClaims. The API
// server's own counters say what it served safe-ipam: the requests for
// Nodes, Calico's resources, AddressClaims, Leases and access reviews,
// and their response sizes.
type kubeCluster struct {
	o   Options
	srv *kubetest.Server
	dyn dynamic.Interface
}

// claimsGVR are safe-ipam's AddressClaims.
var claimsGVR = schema.GroupVersionResource{Group: claims.Group, Version: claims.Version, Resource: claims.Resource}

func newKubeCluster(ctx context.Context, o Options) (*kubeCluster, error) {
	if o.Nodes > 16384 || o.Pods > 256 {
		return nil, fmt.Errorf("%d nodes x %d pods: the other nodes' claims are planted in 100.64.0.0/10, up to 16,384 nodes x 256 pods", o.Nodes, o.Pods)
	}
	// Without the server's own Lease, renewed every 10 s, the Leases it
	// serves are the sweeps' alone.
	srv, err := kubetest.New(filepath.Join(o.Dir, "kube"), "--feature-gates=APIServerIdentity=false")
	if err != nil {
		return nil, err
	}
	c := &kubeCluster{o: o, srv: srv}
	planter := srv.Config()
	planter.QPS, planter.Burst = 1000, 1000 // planting is not what is measured
	if c.dyn, err = dynamic.NewForConfig(planter); err != nil {
		srv.Close()
		return nil, err
	}
	if err := calicosim.InstallKubeCRDs(ctx, srv.Config(), calicodata.Path(calicodata.CRDs)); err != nil {
		srv.Close()
		return nil, err
	}
	if err := srv.Apply(filepath.Join(filepath.Dir(o.Manifest), "safe-ipam-claims.yaml")); err != nil {
		srv.Close()
		return nil, err
	}
	return c, nil
}

func (c *kubeCluster) describe() string {
	return "a real kube-apiserver (Calico's Kubernetes datastore; safe-ipam's records in each node's file store, their addresses claimed cluster-wide); what it served: its apiserver_request_total and apiserver_response_sizes for Nodes, crd.projectcalico.org, " + claims.Group + ", Leases and access reviews"
}

// sweeps: the elected gc lists every node's claims (there are no other
// nodes' records to list: they live on their nodes).

func (c *kubeCluster) sweeps() bool { return false }

// countClaims lists every AddressClaim, a page at a time, and sums the
// size of each as JSON, the form the API server keeps a custom
// resource in in its etcd.
func (c *kubeCluster) countClaims(ctx context.Context) (int, int64, error) {
	n, size, cont := 0, int64(0), ""
	for {
		list, err := c.dyn.Resource(claimsGVR).List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			return 0, 0, err
		}
		for _, item := range list.Items {
			data, err := item.MarshalJSON()
			if err != nil {
				return 0, 0, err
			}
			n, size = n+1, size+int64(len(data))
		}
		if cont = list.GetContinue(); cont == "" {
			return n, size, nil
		}
	}
}

func (c *kubeCluster) target() string { return strings.TrimPrefix(c.srv.URL, "https://") }

func (c *kubeCluster) close() { c.srv.Close() }

var nodesGVR = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}

// plant creates the pool and every node's Kubernetes Node, and for each
// simulated node its pods' addresses in Calico's IPAM objects (as
// calico-ipam allocates them) and their records in its file store.
func (c *kubeCluster) plant(ctx context.Context) (int64, error) {
	if err := calicosim.SeedKubeIPPool(ctx, c.srv.Config(), "default-ipv4-ippool", "10.0.0.0/8", c.o.BlockSize); err != nil {
		return 0, err
	}
	err := inParallel(c.o.Nodes, func(i int) error {
		obj := &unstructured.Unstructured{Object: map[string]any{}}
		obj.SetAPIVersion("v1")
		obj.SetKind("Node")
		obj.SetName(nodeName(i))
		_, err := c.dyn.Resource(nodesGVR).Create(ctx, obj, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("planting Nodes: %w", err)
	}
	pools := []calico.IPPool{{Kind: calico.KindIPPool, Metadata: calico.ObjectMeta{Name: "default-ipv4-ippool"},
		Spec: calico.IPPoolSpec{CIDR: "10.0.0.0/8", BlockSize: c.o.BlockSize, NodeSelector: "all()"}}}
	api, err := kubeapi.New(c.srv.Kubeconfig, 30*time.Second)
	if err != nil {
		return 0, err
	}
	claimer := claims.NewClient(api)
	defer claimer.Close()
	for i := range c.o.Simulated {
		if err := c.plantRecords(ctx, i, pools, claimer); err != nil {
			return 0, err
		}
	}
	// The other nodes' pods, claimed as their nodes' commits claim them;
	// their addresses are outside the pool, where no simulated node's is.
	err = inParallel(c.o.Nodes-c.o.Simulated, func(j int) error {
		i := c.o.Simulated + j
		for p := range c.o.Pods {
			addr := nthAddr(i, p)
			rec := podRecord(i, p, netip.PrefixFrom(addr, 32), time.Now().Add(-time.Hour))
			rec.Host = nodeName(i)
			if _, err := claimer.Claim(ctx, rec, addr); err != nil {
				return fmt.Errorf("claim of %s: %w", rec.Attachment, err)
			}
		}
		return nil
	})
	return 0, err
}

// nthAddr is the address of pod p of node i that is not simulated: one of
// 100.64.0.0/10, 256 a node (16,384 nodes at most).
func nthAddr(i, p int) netip.Addr {
	return netip.AddrFrom4([4]byte{100, 64 + byte(i>>8&63), byte(i), byte(p)})
}

func (c *kubeCluster) plantRecords(ctx context.Context, i int, pools []calico.IPPool, claimer *claims.Client) error {
	st, err := filestore.Open(stateDir(c.o, i))
	if err != nil {
		return err
	}
	defer st.Close()
	alloc := &calicosim.Allocator{Kube: c.dyn, Node: nodeName(i)}
	old := time.Now().Add(-time.Hour)
	for p := range c.o.Pods {
		asg, err := alloc.Assign(ctx, pools, Network+"."+containerID(i, p), nil)
		if err != nil {
			return err
		}
		rec := podRecord(i, p, asg.Prefix(), old.Add(time.Duration(p)*time.Second))
		rec.Host = record.ThisHost() // the simulated nodes run on this machine
		if _, err := st.Commit(ctx, nil, rec); err != nil {
			return fmt.Errorf("record %s of %s: %w", rec.Attachment, nodeName(i), err)
		}
		if _, err := claimer.Claim(ctx, rec, asg.Prefix().Addr()); err != nil {
			return fmt.Errorf("claim of %s: %w", rec.Attachment, err)
		}
	}
	return nil
}

// stateDir is node i's file store.
func stateDir(o Options, i int) string { return filepath.Join(o.Dir, nodeName(i), "state") }

// conflist is Calico's config on node n, with the kubeconfig it names
// (reaching the API server through n's proxy) and the file store.
func (c *kubeCluster) conflist(n *node) (string, error) {
	kubeconfig := filepath.Join(n.dir, "net.d", "calico-kubeconfig")
	cfg := c.srv.Config()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://" + n.proxy.addr(), CertificateAuthority: cfg.CAFile}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		return "", err
	}
	return `{"name":"` + Network + `","cniVersion":"1.0.0","plugins":[{"type":"calico","datastore_type":"kubernetes",` +
		`"kubernetes":{"kubeconfig":"` + kubeconfig + `"},"nodename":"` + n.name + `",` +
		`"ipam":{"type":"calico-ipam","store":{"type":"file","dir":"` + filepath.Join(n.dir, "state") + `"}}}]}`, nil
}

// forget is not simulated: a gone node's records went with it.
func (c *kubeCluster) forget(context.Context, int, time.Duration) (time.Duration, error) {
	return 0, nil
}

// served reads what the API server served safe-ipam: the requests for
// Nodes and Calico's resources (crd.projectcalico.org), its claims, the
// sweeps' Lease and doctor's access reviews, and the bytes of their
// responses. Its own requests (leases, its controllers) are not counted.
func (c *kubeCluster) served(ctx context.Context) (Served, error) {
	by, err := apiServed(ctx, c.srv)
	var s Served
	for res, v := range by {
		if safeIPAMs(res) {
			s = s.Add(v)
		}
	}
	return s, err
}

// apiResource is a group and resource the API server counts requests of.
type apiResource struct{ group, resource string }

// apiServed reads the API server's /metrics: by group and resource, its
// requests (apiserver_request_total) and the bytes of their responses
// (apiserver_response_sizes, of GETs and LISTs).
func apiServed(ctx context.Context, srv *kubetest.Server) (map[apiResource]Served, error) {
	raw, err := srv.Client().Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("the API server's metrics: %w", err)
	}
	by := map[apiResource]Served{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, labels, value, ok := sample(sc.Text())
		if !ok {
			continue
		}
		res := apiResource{labels["group"], labels["resource"]}
		s := by[res]
		switch name {
		case "apiserver_request_total":
			s.Requests += value
		case "apiserver_response_sizes_sum":
			s.Bytes += value
		default:
			continue
		}
		by[res] = s
	}
	return by, sc.Err()
}

// safeIPAMs says whether requests for res are of what safe-ipam asks on
// this datastore: Nodes, Calico's resources, its AddressClaims, the
// sweeps' Lease, doctor's access reviews.
func safeIPAMs(res apiResource) bool {
	switch res.group {
	case calico.KDDGroup, claims.Group, "authorization.k8s.io":
		return true
	case "coordination.k8s.io":
		return res.resource == "leases"
	case "":
		return res.resource == "nodes"
	}
	return false
}

// sample parses one line of Prometheus' text format: name{k="v",...} value.
func sample(line string) (name string, labels map[string]string, value float64, ok bool) {
	open, end := strings.IndexByte(line, '{'), strings.LastIndexByte(line, '}')
	if strings.HasPrefix(line, "#") || open < 0 || end < open {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
	if err != nil {
		return "", nil, 0, false
	}
	labels = map[string]string{}
	for _, kv := range strings.Split(line[open+1:end], ",") {
		if k, val, found := strings.Cut(kv, "="); found {
			labels[k] = strings.Trim(val, `"`)
		}
	}
	return line[:open], labels, v, true
}
