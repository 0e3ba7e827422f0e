package liveness

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultCRITimeout bounds one read of the runtime: a runtime that does
// not answer in time is unreadable, never empty (incident 003).
const DefaultCRITimeout = 10 * time.Second

// criMaxMessage is what the kubelet allows a CRI answer: a node with many
// pods exceeds gRPC's 4 MiB default.
const criMaxMessage = 16 << 20

// CRI is the container runtime on one node, asked over its CRI API
// (runtime/v1) as the kubelet asks it. What runs are its READY pod
// sandboxes: a NOTREADY sandbox was stopped, and stopping sent its CNI
// DEL (or will retry it). A sandbox whose RunPodSandbox has not returned
// is not listed at all; callers cover that window with their grace
// period (GC) or --min-age and --settle (audit, repair).
type CRI struct {
	// Endpoint is the runtime's socket, unix:///run/containerd/containerd.sock
	// or a bare path.
	Endpoint string
	Node     string
	// Timeout bounds one Read; 0 means DefaultCRITimeout.
	Timeout time.Duration
}

// Read lists the READY sandboxes with their pod and IPs. The view names
// containers only: CRI reports a sandbox's IPs, never its interfaces.
func (c CRI) Read(ctx context.Context) (*View, error) {
	target, err := criTarget(c.Endpoint)
	if err != nil {
		return nil, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultCRITimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(criMaxMessage)))
	if err != nil {
		return nil, fmt.Errorf("CRI runtime %s: %w", c.Endpoint, err)
	}
	defer conn.Close()
	atts, err := sandboxes(ctx, runtimeapi.NewRuntimeServiceClient(conn))
	if err != nil {
		return nil, fmt.Errorf("CRI runtime %s: %w", c.Endpoint, err)
	}
	v := NewView("cri "+c.Endpoint, c.Node, atts)
	v.ContainersOnly = true
	return v, nil
}

// criTarget turns the kubelet's endpoint form into a gRPC target. Only
// unix sockets are taken: that is how a Linux node serves CRI.
func criTarget(endpoint string) (string, error) {
	switch {
	case endpoint == "":
		return "", errors.New("CRI runtime: no endpoint")
	case strings.HasPrefix(endpoint, "unix://"):
		if strings.TrimPrefix(endpoint, "unix://") == "" {
			return "", fmt.Errorf("CRI runtime %s: no socket path", endpoint)
		}
		return endpoint, nil
	case strings.HasPrefix(endpoint, "/"):
		return "unix://" + endpoint, nil
	}
	return "", fmt.Errorf("CRI runtime %s: want unix:///path/to/socket or an absolute socket path", endpoint)
}

// sandboxes lists every sandbox the runtime has, and asks the READY ones
// for their IPs. A NOTREADY sandbox counts as running too: containerd
// reports a sandbox whose state it cannot tell (after a restart, with a
// hung shim) as NOTREADY, and its pod may still run; only a sandbox the
// runtime no longer lists is gone (the kubelet removes stopped ones).
// Any failed call fails the read; a sandbox removed between the list and
// its status is gone, and not listed.
func sandboxes(ctx context.Context, rt runtimeapi.RuntimeServiceClient) ([]Running, error) {
	list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListPodSandbox: %w", err)
	}
	var atts []Running
	for _, sb := range list.GetItems() {
		if sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY {
			md := sb.GetMetadata()
			atts = append(atts, Running{ContainerID: sb.GetId(), PodNamespace: md.GetNamespace(), PodName: md.GetName(), PodUID: md.GetUid()})
			continue
		}
		a, found, err := sandboxAttachment(ctx, rt, sb.GetId())
		if err != nil {
			return nil, err
		}
		if found {
			atts = append(atts, a)
		}
	}
	return atts, nil
}

func sandboxAttachment(ctx context.Context, rt runtimeapi.RuntimeServiceClient, id string) (Running, bool, error) {
	resp, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
	if status.Code(err) == codes.NotFound {
		return Running{}, false, nil
	}
	if err != nil {
		return Running{}, false, fmt.Errorf("PodSandboxStatus %s: %w", id, err)
	}
	st := resp.GetStatus()
	md := st.GetMetadata()
	if md.GetNamespace() == "" || md.GetName() == "" {
		return Running{}, false, fmt.Errorf("PodSandboxStatus %s: no pod namespace or name in its metadata", id)
	}
	a := Running{ContainerID: id, PodNamespace: md.GetNamespace(), PodName: md.GetName(), PodUID: md.GetUid()}
	if ip := st.GetNetwork().GetIp(); ip != "" {
		a.IPs = append(a.IPs, ip)
	}
	for _, ip := range st.GetNetwork().GetAdditionalIps() {
		a.IPs = append(a.IPs, ip.GetIp())
	}
	return a, true, nil
}
