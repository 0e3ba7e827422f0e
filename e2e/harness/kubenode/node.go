// Package kubenode runs a real Kubernetes cluster for tests: kube-apiserver
// (e2e/harness/kubetest, with its etcd) on a loopback port of the host;
// kube-controller-manager and kube-scheduler inside a private mount,
// network and PID namespace of their own (the control plane); and one or
// more nodes (containerd and kubelet), each inside its own private
// namespaces with a cgroup root and node address of its own. Every
// namespace sees the API server and etcd at the host's addresses through
// proxies, so the components and the pods on a node's host network use the
// same URLs as the test.
//
// Inside, the node has private /var/lib and /var/log (directories of the
// node's scratch dir), and /etc, /opt and /run overlaid, so
// /etc/cni/net.d and /opt/cni/bin exist there and nowhere else. Path gives
// the host's view of any path inside. The test's cleanup kills the
// namespace's PID 1, which ends every process of the node, and removes
// the cgroups; on failure the components' logs are kept and named in the
// test log.
//
// Several clusters run side by side: each node has its own namespaces,
// ports, cgroup root and directories.
package kubenode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
)

// Options say what a node is started with.
type Options struct {
	// Name is the node's name in Kubernetes.
	Name string
	// Pause is the static pause program: the namespaces' PID 1.
	Pause string
	// SandboxImage is the containerd's sandbox_image tag; Images are
	// docker-archives imported before the kubelet starts (the sandbox
	// image among them: nothing can be pulled here).
	SandboxImage string
	Images       []string
	// Env is added to containerd's, and so every CNI plugin's, environment.
	Env []string
}

// Node is one running node of a cluster, or its control plane.
type Node struct {
	Name string
	// IP is the node's address: a /32 on the loopback of its netns (the
	// kubelet refuses loopback addresses, and finds no default route).
	IP string
	// Dir is the node's scratch dir on the host.
	Dir string
	// API is the cluster's kube-apiserver; its etcd is API.Etcd().
	API        *kubetest.Server
	Holder     *containerd.Holder
	Containerd *containerd.Containerd

	opt        Options
	cgroupRoot string
	procs      map[string]*process
	proxies    []*containerd.EtcdProxy
	// ownAPI is the API server the control plane started, and stops.
	ownAPI *kubetest.Server
}

// Start starts a one-node cluster and registers its teardown with t.
func Start(t testing.TB, opt Options) *Node {
	t.Helper()
	return StartCluster(t, ClusterOptions{Names: []string{opt.Name}, Node: opt}).Nodes[0]
}

// step is one part of a node's start.
type step struct {
	what string
	do   func(context.Context) error
}

// newNode makes a node's scratch dir and runs steps in it.
func newNode(ctx context.Context, name, ip string, opt Options, steps func(*Node) []step) (*Node, error) {
	// Short: containerd's socket path must fit a sockaddr_un.
	dir, err := os.MkdirTemp(os.TempDir(), dirPrefix)
	if err != nil {
		return nil, err
	}
	n := &Node{Name: name, IP: ip, Dir: dir, opt: opt, procs: map[string]*process{},
		cgroupRoot: "/" + filepath.Base(dir)}
	for _, s := range steps(n) {
		if err := s.do(ctx); err != nil {
			return n, fmt.Errorf("kubenode %s: %s: %w", name, s.what, err)
		}
	}
	return n, nil
}

// nodeSteps start a node of the cluster whose API server is api.
func nodeSteps(api *kubetest.Server) func(*Node) []step {
	return func(n *Node) []step {
		n.API = api
		return []step{
			{"namespaces", n.startHolder},
			{"proxies", n.startProxies},
			{"cgroups", n.makeCgroups},
			{"containerd", n.startContainerd},
			{"kubelet", n.startKubelet},
		}
	}
}

// inside are the node's private directories: host dir under Dir, mounted
// over the path inside.
var inside = []struct{ host, path string }{
	{"var-lib", "/var/lib"},
	{"var-log", "/var/log"},
}

// overlays are host directories the node sees with private changes.
var overlays = []string{"/etc", "/opt", "/run"}

func (n *Node) startHolder(ctx context.Context) error {
	// The node's host name is its name, as on a machine of its own.
	h, err := containerd.StartHostHolder(ctx, n.opt.Pause, n.Name)
	if err != nil {
		return err
	}
	n.Holder = h
	// What sweep reads to tell a node whose test was killed.
	if err := os.WriteFile(filepath.Join(n.Dir, holderFile), []byte(strconv.Itoa(h.Pid)), 0o644); err != nil {
		return err
	}
	var cmds [][]string
	for _, m := range inside {
		host := filepath.Join(n.Dir, m.host)
		if err := os.MkdirAll(host, 0o755); err != nil {
			return err
		}
		cmds = append(cmds, []string{"mount", "--bind", host, m.path})
	}
	for _, path := range overlays {
		base := filepath.Join(n.Dir, "overlay", strings.Trim(path, "/"))
		upper, work := filepath.Join(base, "upper"), filepath.Join(base, "work")
		if err := os.MkdirAll(upper, 0o755); err != nil {
			return err
		}
		if err := os.MkdirAll(work, 0o755); err != nil {
			return err
		}
		cmds = append(cmds, []string{"mount", "-t", "overlay", "overlay", "-o",
			"lowerdir=" + path + ",upperdir=" + upper + ",workdir=" + work, path})
	}
	cmds = append(cmds,
		[]string{"mkdir", "-p", "/etc/cni/net.d", "/opt/cni/bin", "/run/containerd", "/var/lib/calico", "/run/calico"})
	if n.IP != "" {
		cmds = append(cmds, []string{"ip", "addr", "add", n.IP + "/32", "dev", "lo"})
	}
	for _, args := range cmds {
		if err := h.Run(ctx, args...); err != nil {
			return err
		}
	}
	return n.maskSysctls(ctx)
}

// kernelDefaults are the sysctls the kubelet wants (protectKernelDefaults
// makes it check them instead of writing them): files with these values
// are mounted over the node's /proc/sys, so the shared machine's own are
// never read or written.
var kernelDefaults = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

func (n *Node) maskSysctls(ctx context.Context) error {
	dir := filepath.Join(n.Dir, "sysctl")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for key, value := range kernelDefaults {
		file := filepath.Join(dir, strings.ReplaceAll(key, "/", "."))
		if err := os.WriteFile(file, []byte(value+"\n"), 0o644); err != nil {
			return err
		}
		if err := n.Holder.Run(ctx, "mount", "--bind", file, "/proc/sys/"+key); err != nil {
			return err
		}
	}
	return nil
}

// startProxies makes the API server and etcd answer inside the node's
// netns at the addresses they have on the host.
func (n *Node) startProxies(context.Context) error {
	for _, url := range []string{n.API.URL, n.API.Etcd().Endpoint()} {
		p, err := containerd.StartEtcdProxy(n.Holder.NetNSPath(), url)
		if err != nil {
			return err
		}
		n.proxies = append(n.proxies, p)
	}
	return nil
}

// Path is the host's path of path inside the node (through its PID 1's
// root, so mounts made inside count).
func (n *Node) Path(path string) string {
	return filepath.Join("/proc", strconv.Itoa(n.Holder.Pid), "root", path)
}

// EtcdEndpoint is the etcd the API server and Calico use, as both the
// host and the node reach it.
func (n *Node) EtcdEndpoint() string { return n.API.Etcd().Endpoint() }

// CRISocket is containerd's socket as the host reaches it.
func (n *Node) CRISocket() string { return n.Containerd.Socket() }

func (n *Node) startContainerd(ctx context.Context) error {
	cd := &containerd.Containerd{Holder: n.Holder, Dir: filepath.Join(n.Dir, "containerd"), BinDir: "/opt/cni/bin",
		ConfDir: "/etc/cni/net.d", Env: n.opt.Env, Sandbox: n.opt.SandboxImage}
	state := filepath.Join(cd.Dir, "state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return err
	}
	// The kubelet, and the pods that mount the host's /run/containerd,
	// find the socket where containerd's packages put it.
	if err := n.Holder.Run(ctx, "mount", "--bind", state, "/run/containerd"); err != nil {
		return err
	}
	if err := cd.Start(ctx); err != nil {
		return err
	}
	n.Containerd = cd
	for _, img := range n.opt.Images {
		if err := containerd.ImportImage(ctx, cd.Socket(), img); err != nil {
			return err
		}
	}
	return nil
}

// RestartContainerd stops containerd and starts it again, as a runtime
// upgrade or crash does; pods keep running.
func (n *Node) RestartContainerd(ctx context.Context) error { return n.Containerd.Restart(ctx) }

// RestartKubelet stops the kubelet (SIGTERM) and starts it again.
func (n *Node) RestartKubelet(ctx context.Context) error {
	n.StopKubelet()
	return n.StartKubelet(ctx)
}

// StopKubelet stops the kubelet; pods keep running.
func (n *Node) StopKubelet() { n.procs["kubelet"].stop() }

// StartKubelet starts the kubelet again after StopKubelet.
func (n *Node) StartKubelet(ctx context.Context) error { return n.startKubelet(ctx) }

// Kill ends every process of the node at once (SIGKILL to its PID 1), as
// when its machine is switched off: nothing is torn down, no CNI DEL runs.
// Its Node object stays (see Delete); the rest goes at the test's end.
func (n *Node) Kill() {
	n.Holder.Stop()
	for _, p := range n.procs {
		<-p.done
	}
}

// Delete deletes the node's Node object, as an operator or a cloud
// provider does for a machine that is gone.
func (n *Node) Delete(ctx context.Context) error {
	if err := n.API.Client().CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting Node %s: %w", n.Name, err)
	}
	return nil
}

func (n *Node) close(t testing.TB) {
	// Ours to clean up from here on, not another test binary's sweep.
	_ = os.Remove(filepath.Join(n.Dir, holderFile))
	for _, name := range []string{"kubelet", "kube-scheduler", "kube-controller-manager"} {
		if p := n.procs[name]; p != nil {
			p.stop()
		}
	}
	if n.Containerd != nil {
		n.Containerd.Stop()
	}
	if n.Holder != nil {
		n.Holder.Stop()
	}
	for _, p := range n.proxies {
		p.Close()
	}
	if n.ownAPI != nil {
		n.ownAPI.Close()
	}
	if err := removeCgroups(n.cgroupRoot); err != nil {
		t.Errorf("kubenode %s: %v", n.Name, err)
	}
	if t.Failed() {
		n.keepLogs(t)
	}
	if err := os.RemoveAll(n.Dir); err != nil {
		t.Errorf("kubenode %s: removing %s: %v", n.Name, n.Dir, err)
	}
}

// process is one component started inside the node.
type process struct {
	name    string
	nsenter *os.Process
	pid     int
	done    chan struct{}
	log     *os.File
}

// startProcess runs args inside the node, logging to logs/<name>.log.
func (n *Node) startProcess(ctx context.Context, name string, args ...string) error {
	logDir := filepath.Join(n.Dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := n.Holder.Command(context.Background(), args...)
	cmd.Env = containerd.ProcessEnv()
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, nsenter: cmd.Process, done: make(chan struct{}), log: log}
	go func() { _ = cmd.Wait(); close(p.done) }()
	n.procs[name] = p
	if p.pid, err = containerd.ChildOf(ctx, cmd.Process.Pid); err != nil {
		p.stop()
		return err
	}
	return nil
}

// stop ends the component: SIGTERM, then SIGKILL after 15 s.
func (p *process) stop() {
	select {
	case <-p.done:
	default:
		if p.pid != 0 {
			_ = syscall.Kill(p.pid, syscall.SIGTERM)
		} else {
			_ = p.nsenter.Kill()
		}
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
			<-p.done
		}
	}
	p.log.Close()
}
