package scale

import (
	"context"
	"fmt"
	"net"
	"os"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// runtime is a node's CRI runtime as gc reads it: a unix socket that
// lists the node's sandboxes. They are NOTREADY, which gc counts as
// running without asking each one's status: one call a round, as on a
// node whose runtime answers at once.
type runtime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	sandboxes []*runtimeapi.PodSandbox
	srv       *grpc.Server
}

// startRuntime serves ids as the sandboxes of a runtime at socket.
func startRuntime(socket string, ids []string) (*runtime, error) {
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("CRI socket %s: %w", socket, err)
	}
	r := &runtime{srv: grpc.NewServer()}
	for _, id := range ids {
		r.sandboxes = append(r.sandboxes, &runtimeapi.PodSandbox{Id: id, State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY,
			Metadata: &runtimeapi.PodSandboxMetadata{Name: id, Namespace: "default", Uid: id}})
	}
	runtimeapi.RegisterRuntimeServiceServer(r.srv, r)
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *runtime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: r.sandboxes}, nil
}

func (r *runtime) close() { r.srv.Stop() }
