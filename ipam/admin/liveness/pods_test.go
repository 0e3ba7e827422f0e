package liveness_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness/livenesstest"
)

// kube is one real kube-apiserver for the package, started by the first
// test that needs it; tests keep apart by node name.
var kube kubetest.Shared

func TestMain(m *testing.M) { kube.Main(m) }

// rbacFile is the ClusterRole deploy/ ships for the admin commands.
var rbacFile = filepath.Join("..", "..", "..", "deploy", "safe-ipam-rbac.yaml")

// newNode is a node name no other test uses.
func newNode(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "node-" + hex.EncodeToString(b)
}

// user applies deploy/'s ClusterRole and makes a user that holds role
// ("" for none).
func user(t *testing.T, srv *kubetest.Server, role string) string {
	t.Helper()
	if err := srv.Apply(rbacFile); err != nil {
		t.Fatal(err)
	}
	cfg, err := srv.User("u-"+newNode(t), role)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// podsBackend drives pods bound to its own node through the API, as the
// scheduler and the kubelet would; the source reads them as a user with
// deploy/'s ClusterRole.
type podsBackend struct {
	srv        *kubetest.Server
	node       string
	kubeconfig string
	n          int
}

func newPodsBackend(t *testing.T) livenesstest.Backend {
	srv := kube.Get(t)
	node := newNode(t)
	if err := srv.SetNodeReady(node, true); err != nil { // its kubelet registered it
		t.Fatal(err)
	}
	return &podsBackend{srv: srv, node: node, kubeconfig: user(t, srv, "safe-ipam")}
}

func (b *podsBackend) Source() liveness.Source {
	return liveness.Pods{Kubeconfig: b.kubeconfig, Node: b.node, Timeout: 5 * time.Second}
}
func (b *podsBackend) Node() string { return b.node }

func (b *podsBackend) Start(t *testing.T, ns, name string) liveness.Running {
	b.n++
	ip := fmt.Sprintf("10.244.1.%d", b.n)
	pod, err := b.srv.RunPod(ns, name, b.node, ip, "fd00::"+fmt.Sprint(b.n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.srv.DeletePod(ns, name) })
	return liveness.Running{PodNamespace: ns, PodName: name, PodUID: string(pod.UID), IPs: []string{ip, "fd00::" + fmt.Sprint(b.n)}}
}

func (b *podsBackend) Stop(t *testing.T, a liveness.Running) {
	if err := b.srv.DeletePod(a.PodNamespace, a.PodName); err != nil {
		t.Fatal(err)
	}
}

// Break: the same API server, asked by a user that holds no role. A 403
// must not read as "no pods".
func (b *podsBackend) Break(t *testing.T) { b.kubeconfig = user(t, b.srv, "") }

func TestPodsSource(t *testing.T) { livenesstest.Run(t, newPodsBackend) }

// What runs is every pod bound to the node: one with no address yet (its
// ADD may be running) and one being deleted (its DEL may be running) are
// listed as holding what they hold; a finished pod by name only; a
// host-network pod without the node's addresses; another node's pods not.
// However many pages the list takes.
func TestPodsSourceListsInFlightPods(t *testing.T) {
	srv := kube.Get(t)
	node, other := newNode(t), newNode(t)
	ns := "inflight-" + node
	run := func(name, node string, ips ...string) *corev1.Pod {
		pod, err := srv.RunPod(ns, name, node, ips...)
		if err != nil {
			t.Fatal(err)
		}
		return pod
	}
	run("pending", node)
	run("elsewhere", other, "10.244.2.9")
	deleting := run("deleting", node, "10.244.2.2")
	deleting.Finalizers = []string{"example.com/hold"}
	pods := srv.Client().CoreV1().Pods(ns)
	if _, err := pods.Update(t.Context(), deleting, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(t.Context(), "deleting", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.DeletePod(ns, "deleting") })
	done := run("done", node, "10.244.2.3")
	done.Status.Phase = corev1.PodSucceeded
	if _, err := pods.UpdateStatus(t.Context(), done, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	host := run("host", node)
	host.Status.PodIPs, host.Status.PodIP = []corev1.PodIP{{IP: "192.168.0.5"}}, "192.168.0.5"
	host.Spec.HostNetwork = true // immutable after creation: recreate below
	if err := srv.DeletePod(ns, "host"); err != nil {
		t.Fatal(err)
	}
	host.ResourceVersion, host.UID = "", ""
	if _, err := pods.Create(t.Context(), host, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Pages of one pod: the list must follow every continuation.
	v, err := liveness.Pods{Kubeconfig: user(t, srv, "safe-ipam"), Node: node, PageSize: 1}.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, a := range v.Attachments {
		got[a.PodName] = a.IPs
		if a.PodUID == "" || a.PodNamespace != ns || a.ContainerID != "" {
			t.Errorf("listed %+v", a)
		}
	}
	want := map[string][]string{"pending": nil, "deleting": {"10.244.2.2"}, "done": nil, "host": nil}
	if len(got) != len(want) {
		t.Fatalf("listed %v, want %v", got, want)
	}
	for name, ips := range want {
		if g, ok := got[name]; !ok || !slices.Equal(g, ips) {
			t.Errorf("pod %s listed with %v (listed: %v), want %v", name, g, ok, ips)
		}
	}
	if !v.PodsOnly || !v.ListsPod(ns+".pending") || v.ListsPod(ns+".elsewhere") {
		t.Errorf("view PodsOnly %v, pods %v", v.PodsOnly, got)
	}
}

// An API server that refuses, is down, hangs, or a kubeconfig that is not
// there, is an error: never "no pods" (incident 003).
func TestPodsSourceUnreadable(t *testing.T) {
	srv := kube.Get(t)
	node := newNode(t)
	if _, err := srv.RunPod("unreadable-"+node, "web-0", node, "10.244.3.1"); err != nil {
		t.Fatal(err)
	}
	good := user(t, srv, "safe-ipam")
	tests := []struct {
		name       string
		kubeconfig func(t *testing.T) string
		node       string
	}{
		{"no role bound", func(t *testing.T) string { return user(t, srv, "") }, node},
		{"a role without pods", func(t *testing.T) string { return user(t, srv, "system:basic-user") }, node},
		{"API server down", func(t *testing.T) string { return downServer(t) }, node},
		{"API server hangs", func(t *testing.T) string { return hangingServer(t, good) }, node},
		{"no kubeconfig file", func(t *testing.T) string { return filepath.Join(t.TempDir(), "missing") }, node},
		{"no node", func(*testing.T) string { return good }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := liveness.Pods{Kubeconfig: tt.kubeconfig(t), Node: tt.node, Timeout: 2 * time.Second}.Read(t.Context())
			if err == nil {
				t.Fatalf("read %+v", v)
			}
			t.Log(err)
		})
	}
	if v, err := (liveness.Pods{Kubeconfig: good, Node: node}).Read(t.Context()); err != nil || len(v.Attachments) != 1 {
		t.Fatalf("with deploy/'s ClusterRole: %v, %+v", err, v)
	}
}

// downServer is a kubeconfig for a real API server that was stopped.
func downServer(t *testing.T) string {
	srv := kubetest.Start(t)
	cfg := srv.Kubeconfig
	srv.Stop()
	return cfg
}

// hangingServer is the kubeconfig good, pointed at a listener that
// accepts connections and never answers.
func hangingServer(t *testing.T, good string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var held []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				for _, c := range held {
					c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	return kubetest.Repoint(t, good, "https://"+ln.Addr().String())
}

// A partitioned node's pods are deleted from the API while they still run
// there: the API speaks only for a Ready node.
func TestPodsSourceSpeaksOnlyForAReadyNode(t *testing.T) {
	srv := kube.Get(t)
	good := user(t, srv, "safe-ipam")
	cut, unregistered := newNode(t), newNode(t)
	if _, err := srv.RunPod("partitioned-"+cut, "web-0", cut, "10.244.3.9"); err != nil {
		t.Fatal(err)
	}
	if err := srv.SetNodeReady(cut, false); err != nil {
		t.Fatal(err)
	}
	for node, says := range map[string]string{cut: "is not Ready", unregistered: "not found"} {
		v, err := liveness.Pods{Kubeconfig: good, Node: node, Timeout: 5 * time.Second}.Read(t.Context())
		if err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("node %s: read %+v, %v; want an error saying %q", node, v, err, says)
		}
	}
	if err := srv.SetNodeReady(cut, true); err != nil {
		t.Fatal(err)
	}
	if v, err := (liveness.Pods{Kubeconfig: good, Node: cut, Timeout: 5 * time.Second}).Read(t.Context()); err != nil || !v.ListsPod("partitioned-"+cut+".web-0") {
		t.Fatalf("Ready again: %+v, %v", v, err)
	}
}
