package containerd

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// callTimeout bounds one CRI call: a sandbox's CNI ADD or DEL runs inside.
const callTimeout = 90 * time.Second

// Pod is a pod's identity as the kubelet gives it to RunPodSandbox.
type Pod struct {
	Namespace, Name, UID string
}

func (p Pod) String() string { return p.Namespace + "/" + p.Name + " (" + p.UID + ")" }

// Kubelet drives a containerd over the CRI API as the kubelet does.
type Kubelet struct {
	conn *grpc.ClientConn
	rt   runtimeapi.RuntimeServiceClient
	// LogDir is where sandboxes' log directories go.
	LogDir string
}

// NewKubelet connects to endpoint. Calls wait for the runtime to be ready
// (across a restart) within their time limit.
func NewKubelet(endpoint, logDir string) (*Kubelet, error) {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		return nil, fmt.Errorf("CRI client for %s: %w", endpoint, err)
	}
	return &Kubelet{conn: conn, rt: runtimeapi.NewRuntimeServiceClient(conn), LogDir: logDir}, nil
}

// Close closes the connection.
func (k *Kubelet) Close() { k.conn.Close() }

// RunPodSandbox starts a sandbox for pod with its own network namespace
// and returns its ID.
func (k *Kubelet) RunPodSandbox(ctx context.Context, pod Pod) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	pod0 := runtimeapi.NamespaceMode_POD
	resp, err := k.rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: pod.Name, Namespace: pod.Namespace, Uid: pod.UID},
		Hostname:     pod.Name,
		LogDirectory: filepath.Join(k.LogDir, pod.Namespace+"_"+pod.Name+"_"+pod.UID),
		Labels:       map[string]string{"io.kubernetes.pod.name": pod.Name, "io.kubernetes.pod.namespace": pod.Namespace, "io.kubernetes.pod.uid": pod.UID},
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: pod0, Pid: pod0, Ipc: pod0}}},
	}})
	if err != nil {
		return "", fmt.Errorf("RunPodSandbox %s: %w", pod, err)
	}
	return resp.PodSandboxId, nil
}

// PodSandboxStatus is the sandbox's status.
func (k *Kubelet) PodSandboxStatus(ctx context.Context, id string) (*runtimeapi.PodSandboxStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := k.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if err != nil {
		return nil, fmt.Errorf("PodSandboxStatus %s: %w", Short(id), err)
	}
	return resp.Status, nil
}

// IP is the sandbox's IP as PodSandboxStatus reports it, the address the
// kubelet publishes for the pod.
func (k *Kubelet) IP(ctx context.Context, id string) (netip.Addr, error) {
	st, err := k.PodSandboxStatus(ctx, id)
	if err != nil {
		return netip.Addr{}, err
	}
	addr, err := netip.ParseAddr(st.GetNetwork().GetIp())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("sandbox %s reports IP %q: %w", Short(id), st.GetNetwork().GetIp(), err)
	}
	return addr, nil
}

// StopPodSandbox stops the sandbox; containerd sends the CNI DEL.
func (k *Kubelet) StopPodSandbox(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := k.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("StopPodSandbox %s: %w", Short(id), err)
	}
	return nil
}

// RemovePodSandbox removes a stopped sandbox; containerd sends a second DEL.
func (k *Kubelet) RemovePodSandbox(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := k.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		return fmt.Errorf("RemovePodSandbox %s: %w", Short(id), err)
	}
	return nil
}

// Delete stops and removes the sandbox, as the kubelet does when a pod
// is deleted.
func (k *Kubelet) Delete(ctx context.Context, id string) error {
	if err := k.StopPodSandbox(ctx, id); err != nil {
		return err
	}
	return k.RemovePodSandbox(ctx, id)
}

// ListPodSandbox lists every sandbox the runtime knows.
func (k *Kubelet) ListPodSandbox(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := k.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListPodSandbox: %w", err)
	}
	return resp.Items, nil
}

// CNIConfig is the CNI config containerd has loaded, from its verbose
// status, to wait for it to take a changed conflist.
func (k *Kubelet) CNIConfig(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := k.rt.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
	if err != nil {
		return "", fmt.Errorf("Status: %w", err)
	}
	return resp.Info["cniconfig"], nil
}

// Short abbreviates a container ID as runtimes print it.
func Short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
