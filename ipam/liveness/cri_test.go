package liveness_test

import (
	"context"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/safe-ipam/safe-ipam/ipam/liveness"
)

// These tests pin how the CRI source reads answers a real runtime can
// give; the contract itself (livenesstest) runs against a real containerd
// in e2e/runtime.

// fakeRuntime answers ListPodSandbox and PodSandboxStatus from a table.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	sandboxes []*runtimeapi.PodSandboxStatus
	// statusOf overrides what PodSandboxStatus says of a sandbox id.
	statusOf map[string]error
	listErr  error
	hang     bool
}

func (f *fakeRuntime) ListPodSandbox(ctx context.Context, _ *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	if f.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if f.listErr != nil {
		return nil, f.listErr
	}
	resp := &runtimeapi.ListPodSandboxResponse{}
	for _, s := range f.sandboxes {
		resp.Items = append(resp.Items, &runtimeapi.PodSandbox{Id: s.Id, Metadata: s.Metadata, State: s.State})
	}
	return resp, nil
}

func (f *fakeRuntime) PodSandboxStatus(_ context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	if err := f.statusOf[req.PodSandboxId]; err != nil {
		return nil, err
	}
	for _, s := range f.sandboxes {
		if s.Id == req.PodSandboxId {
			return &runtimeapi.PodSandboxStatusResponse{Status: s}, nil
		}
	}
	return nil, status.Error(codes.NotFound, "no such sandbox")
}

// serve runs f on a unix socket and returns the endpoint.
func serve(t *testing.T, f *fakeRuntime) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cri.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, f)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return "unix://" + sock
}

func sandbox(id, ns, name string, state runtimeapi.PodSandboxState, ips ...string) *runtimeapi.PodSandboxStatus {
	s := &runtimeapi.PodSandboxStatus{Id: id, State: state,
		Metadata: &runtimeapi.PodSandboxMetadata{Namespace: ns, Name: name, Uid: "uid-" + id}}
	if len(ips) > 0 {
		s.Network = &runtimeapi.PodSandboxNetworkStatus{Ip: ips[0]}
		for _, ip := range ips[1:] {
			s.Network.AdditionalIps = append(s.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	return s
}

const ready, notReady = runtimeapi.PodSandboxState_SANDBOX_READY, runtimeapi.PodSandboxState_SANDBOX_NOTREADY

func TestCRIListsReadySandboxes(t *testing.T) {
	f := &fakeRuntime{
		sandboxes: []*runtimeapi.PodSandboxStatus{
			sandbox("a", "default", "web-0", ready, "10.244.0.1", "fd00::1"),
			sandbox("b", "default", "web-1", notReady, "10.244.0.2"),
			sandbox("c", "kube-system", "host-net", ready),
			sandbox("gone", "default", "web-2", ready, "10.244.0.3"),
		},
		// Removed between the list and its status: gone, not an error.
		statusOf: map[string]error{"gone": status.Error(codes.NotFound, "sandbox gone")},
	}
	v, err := liveness.CRI{Endpoint: serve(t, f), Node: "node1"}.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range v.Attachments {
		ids = append(ids, a.ContainerID)
	}
	if !slices.Equal(ids, []string{"a", "c"}) {
		t.Fatalf("listed %v, want the READY sandboxes a and c", ids)
	}
	a := v.Attachments[0]
	if a.PodNamespace != "default" || a.PodName != "web-0" || a.PodUID != "uid-a" || !slices.Equal(a.IPs, []string{"10.244.0.1", "fd00::1"}) {
		t.Errorf("sandbox a read as %+v", a)
	}
	if v.Node != "node1" || !v.ContainersOnly {
		t.Errorf("view node %q containersOnly %v", v.Node, v.ContainersOnly)
	}
}

// A runtime that errors, hangs or is not there is unreadable, never
// "nothing runs" (incident 003).
func TestCRIUnreadable(t *testing.T) {
	withRuntime := func(f *fakeRuntime) func(*testing.T) string {
		return func(t *testing.T) string { return serve(t, f) }
	}
	tests := []struct {
		name     string
		endpoint func(*testing.T) string
	}{
		{"list fails", withRuntime(&fakeRuntime{listErr: status.Error(codes.Internal, "boom")})},
		{"status fails", withRuntime(&fakeRuntime{sandboxes: []*runtimeapi.PodSandboxStatus{sandbox("a", "default", "web-0", ready, "10.244.0.1")},
			statusOf: map[string]error{"a": status.Error(codes.Unavailable, "busy")}})},
		{"hangs", withRuntime(&fakeRuntime{hang: true})},
		{"READY without pod identity", withRuntime(&fakeRuntime{sandboxes: []*runtimeapi.PodSandboxStatus{{Id: "x", State: ready}}})},
		{"not the CRI v1 API", serveNothing},
		{"no socket", func(*testing.T) string { return "unix:///nonexistent/cri.sock" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := liveness.CRI{Endpoint: tt.endpoint(t), Node: "node1", Timeout: 500 * time.Millisecond}.Read(t.Context())
			if err == nil {
				t.Fatalf("read %+v", v)
			}
			t.Log(err)
		})
	}
}

// serveNothing is a gRPC server that implements no CRI service.
func serveNothing(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "other.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return "unix://" + sock
}

func TestCRIEndpoint(t *testing.T) {
	for _, ep := range []string{"", "unix://", "tcp://127.0.0.1:1234", "run/containerd.sock"} {
		if _, err := (liveness.CRI{Endpoint: ep}).Read(t.Context()); err == nil {
			t.Errorf("endpoint %q accepted", ep)
		}
	}
}

// A source that names containers only lists every interface of a listed
// container: a record for eth0 or net1 of a running sandbox must not look
// gone. A source that names interfaces keeps telling them apart.
func TestContainersOnlyView(t *testing.T) {
	atts := []liveness.Attachment{{ContainerID: "a", PodNamespace: "default", PodName: "web-0"}}
	tests := []struct {
		containersOnly bool
		cid, ifname    string
		want           bool
	}{
		{true, "a", "eth0", true},
		{true, "a", "net1", true},
		{true, "b", "eth0", false},
		{false, "a", "net1", false},
		{false, "a", "", true},
	}
	for _, tt := range tests {
		v := liveness.NewView("test", "node1", atts)
		v.ContainersOnly = tt.containersOnly
		if got := v.ListsAttachment(tt.cid, tt.ifname); got != tt.want {
			t.Errorf("containersOnly=%v ListsAttachment(%s, %s) = %v, want %v", tt.containersOnly, tt.cid, tt.ifname, got, tt.want)
		}
	}
}
