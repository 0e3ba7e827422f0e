package calicosim

import (
	"fmt"
	"strings"
)

// PodArgs are the CNI_ARGS calico-ipam uses to name handles.
type PodArgs struct {
	Namespace string
	Name      string
}

// HasPod reports whether both pod arguments are present, the condition
// under which Calico keys a handle by pod name.
func (p PodArgs) HasPod() bool { return p.Namespace != "" && p.Name != "" }

// ParsePodArgs reads K8S_POD_NAMESPACE and K8S_POD_NAME from CNI_ARGS
// ("K=V;K=V"), ignoring other keys as calico-ipam does.
func ParsePodArgs(args string) (PodArgs, error) {
	var p PodArgs
	if args == "" {
		return p, nil
	}
	for _, pair := range strings.Split(args, ";") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			return PodArgs{}, fmt.Errorf("CNI_ARGS: invalid pair %q", pair)
		}
		switch k {
		case "K8S_POD_NAMESPACE":
			p.Namespace = v
		case "K8S_POD_NAME":
			p.Name = v
		}
	}
	return p, nil
}
