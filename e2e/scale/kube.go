package scale

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
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
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
)

// kubeCluster is Calico's Kubernetes datastore (KDD): a real
// kube-apiserver holding Calico's IPAM CRDs and the Kubernetes Nodes.
// safe-ipam's records live on each node (the file store, as the plugin
// infers it there), so only the simulated nodes have any. The API
// server's own counters say what it served safe-ipam: the requests for
// Nodes and Calico's resources, and their response sizes.
type kubeCluster struct {
	o   Options
	srv *kubetest.Server
	dyn dynamic.Interface
}

func newKubeCluster(ctx context.Context, o Options) (*kubeCluster, error) {
	srv, err := kubetest.New(filepath.Join(o.Dir, "kube"))
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
	return c, nil
}

func (c *kubeCluster) describe() string {
	return "a real kube-apiserver (Calico's Kubernetes datastore; safe-ipam's records in each node's file store); what it served: its apiserver_request_total and apiserver_response_sizes for Nodes and crd.projectcalico.org"
}

func (c *kubeCluster) sweeps() bool { return false }

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
	for i := range c.o.Simulated {
		if err := c.plantRecords(ctx, i, pools); err != nil {
			return 0, err
		}
	}
	return 0, nil
}

func (c *kubeCluster) plantRecords(ctx context.Context, i int, pools []calico.IPPool) error {
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
		if _, err := st.Commit(ctx, nil, rec); err != nil {
			return fmt.Errorf("record %s of %s: %w", rec.Attachment, nodeName(i), err)
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

// served reads the API server's /metrics: the requests for Nodes and
// Calico's resources (crd.projectcalico.org), and the bytes of their
// responses. Its own requests (leases, its controllers) are not counted.
func (c *kubeCluster) served(ctx context.Context) (Served, error) {
	raw, err := c.srv.Client().Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return Served{}, fmt.Errorf("the API server's metrics: %w", err)
	}
	var s Served
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, labels, value, ok := sample(sc.Text())
		if !ok || !(labels["group"] == calico.KDDGroup || (labels["group"] == "" && labels["resource"] == "nodes")) {
			continue
		}
		switch name {
		case "apiserver_request_total":
			s.Requests += value
		case "apiserver_response_sizes_sum":
			s.Bytes += value
		}
	}
	return s, sc.Err()
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
