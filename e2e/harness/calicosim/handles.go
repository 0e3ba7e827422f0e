package calicosim

import "fmt"

// HandleMode selects which Calico generation's handle naming to imitate.
type HandleMode string

// Handle generations.
const (
	// ModernHandles is Calico 3.x (CNI plugin v2+): ADD uses
	// "<network>.<containerID>"; DEL releases that and then the pod-name
	// handle of the older generation.
	ModernHandles HandleMode = "modern"
	// LegacyHandles is Calico 2.x (CNI plugin v1): "namespace.podname"
	// for ADD and DEL, the container ID without pod arguments.
	LegacyHandles HandleMode = "legacy"
)

// ParseHandleMode reads CALICO_SIM_HANDLES; empty means modern.
func ParseHandleMode(s string) (HandleMode, error) {
	switch HandleMode(s) {
	case "", ModernHandles:
		return ModernHandles, nil
	case LegacyHandles:
		return LegacyHandles, nil
	}
	return "", fmt.Errorf("CALICO_SIM_HANDLES=%q: want %q or %q", s, ModernHandles, LegacyHandles)
}

// podHandle is the handle Calico 2.x used, and Calico 3.x still releases
// on DEL: pod name when known, else the container ID.
func podHandle(containerID string, pod PodArgs) string {
	if pod.HasPod() {
		return pod.Namespace + "." + pod.Name
	}
	return containerID
}

// AddHandle is the handle an ADD allocates under.
func (m HandleMode) AddHandle(network, containerID string, pod PodArgs) string {
	if m == LegacyHandles {
		return podHandle(containerID, pod)
	}
	return network + "." + containerID
}

// DelHandles are the handles a DEL releases, in order.
func (m HandleMode) DelHandles(network, containerID string, pod PodArgs) []string {
	if m == LegacyHandles {
		return []string{podHandle(containerID, pod)}
	}
	return []string{network + "." + containerID, podHandle(containerID, pod)}
}
