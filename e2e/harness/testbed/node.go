package testbed

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
)

// IfName is the interface every sandbox gets, as kubelet asks for.
const IfName = "eth0"

// commandTimeout bounds one cnitool run; a hung plugin fails the test
// instead of the whole go test timeout.
const commandTimeout = 60 * time.Second

// Pod is the identity kubelet passes to CNI in CNI_ARGS.
type Pod struct {
	Namespace string
	Name      string
	// UID, when set, is passed as K8S_POD_UID, as the kubelet does.
	UID string
}

func (p Pod) String() string { return p.Namespace + "/" + p.Name }

// Sandbox is one incarnation of a pod. Each has its own netns, and so its
// own container ID: cnitool derives the ID from the netns path.
type Sandbox struct {
	Pod   Pod
	Netns Netns
}

// ContainerID is the ID cnitool sends for this sandbox.
func (s Sandbox) ContainerID() string { return cnitoolContainerID(s.Netns.Path()) }

// cnitoolContainerID is how cnitool names the container of a netns path.
func cnitoolContainerID(netnsPath string) string {
	sum := sha512.Sum512([]byte(netnsPath))
	return fmt.Sprintf("cnitool-%x", sum[:10])
}

// ShortID is a prefix of the container ID that is enough for tables.
func (s Sandbox) ShortID() string { return s.ContainerID()[:len("cnitool-")+6] }

// cniArgs is CNI_ARGS as kubelet sets it; a sandbox without a pod name
// gets none of the pod keys.
func (s Sandbox) cniArgs() string {
	args := []string{"IgnoreUnknown=1"}
	if s.Pod.Name != "" {
		args = append(args,
			"K8S_POD_NAMESPACE="+s.Pod.Namespace,
			"K8S_POD_NAME="+s.Pod.Name,
			"K8S_POD_INFRA_CONTAINER_ID="+s.ContainerID())
		if s.Pod.UID != "" {
			args = append(args, "K8S_POD_UID="+s.Pod.UID)
		}
	}
	return strings.Join(args, ";")
}

// Node runs CNI commands the way one node's runtime does: real cnitool
// processes with the node's own config directory.
type Node struct {
	// Name is Calico's nodename of this node.
	Name    string
	Bin     Binaries
	ConfDir string
	// Generation is the Calico handle naming this node's calico-ipam uses.
	Generation Generation
	// Calico is Calico's datastore; with a real calico-ipam the legacy
	// generation is produced by rewriting handles there.
	Calico Datastore
	// Env is added to the environment of cnitool and, through it, of
	// every plugin, for example CALICO_SIM_HANDLES=legacy.
	Env []string
}

// Add attaches the sandbox to the network and returns the result.
func (n *Node) Add(ctx context.Context, network string, sb Sandbox) (*current.Result, error) {
	out, err := n.cnitool(ctx, "add", network, sb)
	if err != nil {
		return nil, err
	}
	res, err := current.NewResult(out)
	if err != nil {
		return nil, fmt.Errorf("cnitool add %s %s: decoding result %q: %w", network, sb.Netns.Name, out, err)
	}
	if n.Generation == Legacy && n.Bin.RealCalico {
		if err := n.Calico.Rekey(ctx, network, sb.ContainerID(), sb.Pod); err != nil {
			return nil, err
		}
	}
	return res.(*current.Result), nil
}

// Check runs CHECK against the result cached by Add.
func (n *Node) Check(ctx context.Context, network string, sb Sandbox) error {
	_, err := n.cnitool(ctx, "check", network, sb)
	return err
}

// Del detaches the sandbox. The netns may already be gone.
func (n *Node) Del(ctx context.Context, network string, sb Sandbox) error {
	_, err := n.cnitool(ctx, "del", network, sb)
	return err
}

// Status asks every plugin of the network whether it is ready for ADD.
func (n *Node) Status(ctx context.Context, network string, sb Sandbox) error {
	_, err := n.cnitool(ctx, "status", network, sb)
	return err
}

// GC runs libcni's GCNetworkList with valid as cni.dev/valid-attachments
// (null when valid is empty, as CRI-O sends it):
// it DELs the attachments libcni cached that are not valid, then sends GC
// to each plugin. cnitool gc cannot send a valid list, hence libcni.
func (n *Node) GC(ctx context.Context, network string, valid []Sandbox) error {
	list, err := libcni.LoadNetworkConf(n.ConfDir, network)
	if err != nil {
		return fmt.Errorf("loading network %s from %s: %w", network, n.ConfDir, err)
	}
	// A nil list when no sandbox is valid, as CRI-O builds it: libcni
	// sends it as null.
	args := &libcni.GCArgs{}
	for _, sb := range valid {
		args.ValidAttachments = append(args.ValidAttachments, types.GCAttachment{ContainerID: sb.ContainerID(), IfName: IfName})
	}
	cni := libcni.NewCNIConfig([]string{n.Bin.Dir}, n.exec())
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	if err := cni.GCNetworkList(ctx, list, args); err != nil {
		return fmt.Errorf("GC of %s on %s: %w", network, n.Name, err)
	}
	return nil
}

// exec runs plugins for libcni with the node's extra environment.
func (n *Node) exec() invoke.Exec {
	return &envExec{DefaultExec: invoke.DefaultExec{RawExec: &invoke.RawExec{}}, env: n.env()}
}

type envExec struct {
	invoke.DefaultExec
	env []string
}

func (e *envExec) ExecPlugin(ctx context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	return e.DefaultExec.ExecPlugin(ctx, path, stdin, append(environ, e.env...))
}

// cnitool runs `cnitool <verb> <network> <netns path>` and returns stdout.
func (n *Node) cnitool(ctx context.Context, verb, network string, sb Sandbox) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.Bin.Path(Cnitool), verb, network, sb.Netns.Path())
	cmd.Env = append(withoutCNIVars(os.Environ()),
		"CNI_PATH="+n.Bin.Dir,
		"NETCONFPATH="+n.ConfDir,
		"CNI_ARGS="+sb.cniArgs(),
		"CNI_IFNAME="+IfName,
	)
	cmd.Env = append(cmd.Env, n.env()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, &CommandError{Verb: verb, Network: network, Netns: sb.Netns.Name, Node: n.Name, Message: cnitoolError(stderr.String()), Err: err}
	}
	return stdout.Bytes(), nil
}

// env is the extra environment of every command on this node.
func (n *Node) env() []string {
	return append(n.Generation.simulatorEnv(n.Bin), n.Env...)
}

// CommandError is a failed cnitool run.
type CommandError struct {
	Verb, Network, Netns, Node string
	// Message is the plugin's error as cnitool printed it.
	Message string
	Err     error
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("cnitool %s %s %s on %s: %v: %s", e.Verb, e.Network, e.Netns, e.Node, e.Err, e.Message)
}

func (e *CommandError) Unwrap() error { return e.Err }

// cnitoolError picks the error line out of cnitool's output, which also
// prints its usage text on failure.
func cnitoolError(stderr string) string {
	for _, line := range strings.Split(stderr, "\n") {
		if msg, ok := strings.CutPrefix(line, "Error: "); ok {
			return msg
		}
	}
	return strings.TrimSpace(stderr)
}

// withoutCNIVars drops CNI_* variables inherited from the caller, so that
// only the ones set here reach cnitool.
func withoutCNIVars(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CNI_") && !strings.HasPrefix(kv, "NETCONFPATH=") {
			out = append(out, kv)
		}
	}
	return out
}

// ResultIPv4 returns the first IPv4 address of a result.
func ResultIPv4(res *current.Result) (netip.Prefix, error) {
	for _, ipc := range res.IPs {
		if ip4 := ipc.Address.IP.To4(); ip4 != nil {
			addr, _ := netip.AddrFromSlice(ip4)
			ones, _ := ipc.Address.Mask.Size()
			return netip.PrefixFrom(addr, ones), nil
		}
	}
	b, _ := json.Marshal(res)
	return netip.Prefix{}, fmt.Errorf("no IPv4 address in result %s", b)
}
