package liveness

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeRuntime answers ListPodSandbox and PodSandboxStatus from a table.
type fakeRuntime struct {
	runtimeapi.RuntimeServiceClient
	items []*runtimeapi.PodSandbox
}

func (f fakeRuntime) ListPodSandbox(context.Context, *runtimeapi.ListPodSandboxRequest, ...grpc.CallOption) (*runtimeapi.ListPodSandboxResponse, error) {
	return &runtimeapi.ListPodSandboxResponse{Items: f.items}, nil
}

func (f fakeRuntime) PodSandboxStatus(_ context.Context, r *runtimeapi.PodSandboxStatusRequest, _ ...grpc.CallOption) (*runtimeapi.PodSandboxStatusResponse, error) {
	for _, sb := range f.items {
		if sb.Id == r.PodSandboxId {
			return &runtimeapi.PodSandboxStatusResponse{Status: &runtimeapi.PodSandboxStatus{Id: sb.Id, Metadata: sb.Metadata, State: sb.State,
				Network: &runtimeapi.PodSandboxNetworkStatus{Ip: "10.244.0.7"}}}, nil
		}
	}
	return nil, nil
}

// containerd reports a sandbox whose state it cannot tell (a hung shim
// after a restart) as NOTREADY, and its pod may still run: only a
// sandbox the runtime no longer lists is gone.
func TestNotReadySandboxesCountAsRunning(t *testing.T) {
	rt := fakeRuntime{items: []*runtimeapi.PodSandbox{
		{Id: "ready", State: runtimeapi.PodSandboxState_SANDBOX_READY, Metadata: &runtimeapi.PodSandboxMetadata{Namespace: "default", Name: "web-0", Uid: "u0"}},
		{Id: "unknown", State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY, Metadata: &runtimeapi.PodSandboxMetadata{Namespace: "default", Name: "web-1", Uid: "u1"}},
	}}
	atts, err := sandboxes(t.Context(), rt)
	if err != nil {
		t.Fatal(err)
	}
	v := NewView("cri test", "node1", atts)
	v.ContainersOnly = true
	if !v.ListsContainer("ready") || !v.ListsContainer("unknown") || !v.ListsPod("default.web-1") {
		t.Fatalf("listed %+v; want the NOTREADY sandbox and its pod listed", atts)
	}
}
