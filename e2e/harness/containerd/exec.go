package containerd

import (
	"context"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ExecSync runs cmd in the running container called container of the pod
// namespace/name, in the container as the runtime runs it (as an exec
// probe does; `kubectl exec` streams through the same runtime), and
// returns its exit code and its output (stdout, then stderr).
func (k *Kubelet) ExecSync(ctx context.Context, namespace, name, container string, cmd []string, timeout time.Duration) (int32, string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout+timeout)
	defer cancel()
	list, err := k.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{
		State: &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
		LabelSelector: map[string]string{"io.kubernetes.pod.namespace": namespace, "io.kubernetes.pod.name": name,
			"io.kubernetes.container.name": container},
	}})
	if err != nil {
		return 0, "", fmt.Errorf("listing the containers of %s/%s: %w", namespace, name, err)
	}
	if len(list.Containers) != 1 {
		return 0, "", fmt.Errorf("%d running containers %s of %s/%s, want 1", len(list.Containers), container, namespace, name)
	}
	resp, err := k.rt.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: list.Containers[0].Id, Cmd: cmd,
		Timeout: int64(timeout / time.Second)})
	if err != nil {
		return 0, "", fmt.Errorf("ExecSync %v in %s of %s/%s: %w", cmd, container, namespace, name, err)
	}
	return resp.ExitCode, string(resp.Stdout) + string(resp.Stderr), nil
}
