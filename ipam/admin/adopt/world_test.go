package adopt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

const (
	network = "k8s-pod-network"
	node1   = "node1"
)

// world is one node: a real etcd with Calico's data written by the
// simulator, the node's conflist naming safe-ipam, and the runtime's CNI
// result cache.
type world struct {
	t        *testing.T
	etcd     *etcdtest.Server
	storeDir string // file store; "" for the etcd store
	cache    string
	conf     string
	confJSON string // the plugin config a runtime hands the chain's IPAM plugin
}

func newWorld(t *testing.T, storeType string) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{t: t, etcd: etcdtest.Start(t), cache: filepath.Join(dir, "results")}
	storeConf := ""
	if storeType == config.StoreFile {
		w.storeDir = filepath.Join(dir, "records")
		storeConf = fmt.Sprintf(`,"store":{"type":"file","dir":%q}`, w.storeDir)
	}
	w.confJSON = fmt.Sprintf(`{"type":"calico","datastore_type":"etcdv3","etcd_endpoints":%q,"nodename":%q,
		"ipam":{"type":"safe-ipam","delegate":{"type":"calico-ipam"}%s}}`, w.etcd.Endpoint(), node1, storeConf)
	w.conf = filepath.Join(dir, "10-calico.conflist")
	list := fmt.Sprintf(`{"name":%q,"cniVersion":"1.0.0","plugins":[%s]}`, network, w.confJSON)
	w.write(w.conf, list)
	if err := os.MkdirAll(w.cache, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := calicosim.SeedIPPool(ctx, w.etcd.Client(), "default-ipv4-ippool", "10.244.0.0/24", 26); err != nil {
		t.Fatal(err)
	}
	if err := calicosim.SeedNode(ctx, w.etcd.Client(), node1); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) write(path, data string) {
	w.t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		w.t.Fatal(err)
	}
}

// pod is one sandbox of a pod, as calico-ipam alone set it up.
type pod struct {
	cid, namespace, name string
	mode                 calicosim.HandleMode
	result               []byte // the chain's result, as the runtime cached it
	ip                   string // with the block's mask
}

func (w *world) sim(mode calicosim.HandleMode) *calicosim.Plugin {
	env := map[string]string{calicosim.EnvLockFile: calicosim.NoLock, calicosim.EnvHandles: string(mode)}
	return calicosim.New(func(k string) string { return env[k] }, &bytes.Buffer{}, &bytes.Buffer{})
}

func (w *world) simArgs(p *pod) *skel.CmdArgs {
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"type":"calico-ipam","datastore_type":"etcdv3",
		"etcd_endpoints":%q,"nodename":%q,"ipam":{"type":"calico-ipam"}}`, network, w.etcd.Endpoint(), node1)
	args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + p.namespace + ";K8S_POD_NAME=" + p.name + ";K8S_POD_INFRA_CONTAINER_ID=" + p.cid
	return &skel.CmdArgs{ContainerID: p.cid, IfName: "eth0", Netns: "/var/run/netns/" + p.cid, StdinData: []byte(conf), Args: args}
}

// start runs calico-ipam's ADD for a pod (before safe-ipam was installed)
// and gives it the chain's result: the IPAM result plus the interface the
// main plugin made.
func (w *world) start(mode calicosim.HandleMode, cid, namespace, name string) *pod {
	w.t.Helper()
	p := &pod{cid: cid, namespace: namespace, name: name, mode: mode}
	res, err := w.sim(mode).Allocate(w.simArgs(p))
	if err != nil {
		w.t.Fatal(err)
	}
	p.ip = res.IPs[0].Address.String()
	var chain map[string]any
	raw, _ := json.Marshal(res)
	_ = json.Unmarshal(raw, &chain)
	chain["interfaces"] = []map[string]any{{"name": "eth0", "sandbox": "/var/run/netns/" + cid}}
	for _, ip := range chain["ips"].([]any) {
		ip.(map[string]any)["interface"] = 0
	}
	p.result, _ = json.Marshal(chain)
	return p
}

// lateDel is calico-ipam's DEL with pod identity: in Calico 2.x it frees
// every address of the pod name, a newer sandbox's too.
func (w *world) lateDel(p *pod) {
	w.t.Helper()
	if err := w.sim(p.mode).Del(w.simArgs(p)); err != nil {
		w.t.Fatal(err)
	}
}

// cacheEntry writes libcni's cache file for the pod, as containerd and
// CRI-O leave it: the plugin config (with its nodename), CNI_ARGS and the
// chain's result.
func (w *world) cacheEntry(p *pod) string {
	w.t.Helper()
	return w.cacheEntryFor(p, network, w.confJSON)
}

func (w *world) cacheEntryFor(p *pod, net, conf string) string {
	w.t.Helper()
	entry := map[string]any{
		"kind": "cniCacheV1", "containerId": p.cid, "config": []byte(conf), "ifName": "eth0", "networkName": net,
		"cniArgs": [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.namespace}, {"K8S_POD_NAME", p.name},
			{"K8S_POD_INFRA_CONTAINER_ID", p.cid}, {"K8S_POD_UID", "uid-" + p.name}},
		"result": json.RawMessage(p.result),
	}
	data, err := json.Marshal(entry)
	if err != nil {
		w.t.Fatal(err)
	}
	path := filepath.Join(w.cache, net+"-"+p.cid+"-eth0")
	w.write(path, string(data))
	return path
}

// run runs `safe-ipam adopt --conf <conf> --json` with args.
func (w *world) run(args ...string) (int, *Plan, string) {
	w.t.Helper()
	var stdout, stderr bytes.Buffer
	code := Run(append([]string{"--conf", w.conf, "--json"}, args...), &stdout, &stderr)
	if stdout.Len() == 0 {
		return code, nil, stderr.String()
	}
	var plan Plan
	if err := json.Unmarshal(stdout.Bytes(), &plan); err != nil {
		w.t.Fatalf("exit %d, %v\n%s\n%s", code, err, stdout.String(), stderr.String())
	}
	return code, &plan, stderr.String()
}

func (w *world) store() store.Store {
	w.t.Helper()
	if w.storeDir != "" {
		st, err := filestore.Open(w.storeDir)
		if err != nil {
			w.t.Fatal(err)
		}
		return st
	}
	return etcdstore.NewWithClient(w.etcd.Client(), config.DefaultEtcdPrefix, node1, 5*time.Second)
}

// records lists the network's records by container ID.
func (w *world) records() map[string]*record.Record {
	w.t.Helper()
	recs, err := w.store().List(context.Background(), network)
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]*record.Record{}
	for _, r := range recs {
		out[r.ContainerID] = r
	}
	return out
}

func byAttachment(plan *Plan) map[string]Action {
	out := map[string]Action{}
	for _, a := range plan.Actions {
		out[a.Attachment] = a
	}
	return out
}

func attName(cid string) string { return network + "/" + cid + "/eth0" }

func mustConfig(t *testing.T, path string) *config.Config {
	t.Helper()
	f, err := cninode.ReadFile(path, "")
	if err != nil || f.SafeIPAM == nil {
		t.Fatalf("reading %s: %+v, %v", path, f, err)
	}
	return f.SafeIPAM
}

func cacheSource(dir string) liveness.CNICache { return liveness.CNICache{Dir: dir, Node: node1} }
