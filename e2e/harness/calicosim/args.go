package calicosim

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
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
// ("K=V;K=V"), ignoring other keys. Whether other keys are allowed at all
// is CheckAddArgs' and CheckDelArgs' business.
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

// addArgs are the only CNI_ARGS keys calico-ipam's ADD knows: any other
// key fails unless IgnoreUnknown is true, which is why runtimes send
// IgnoreUnknown=1.
type addArgs struct {
	types.CommonArgs
	IP net.IP // a requested address
}

// delArgs are the keys calico-ipam's DEL knows: Calico's Kubernetes args.
// The field names are the keys, as types.LoadArgs matches them.
type delArgs struct {
	types.CommonArgs
	IP                         net.IP
	K8S_POD_NAME               types.UnmarshallableString
	K8S_POD_NAMESPACE          types.UnmarshallableString
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString
}

// errRequestedIP: Calico would assign exactly this address; the simulator
// does not model that, and says so rather than assign another one.
var errRequestedIP = errors.New("CNI_ARGS IP (a requested address) is not supported by the calico-ipam simulator")

// CheckAddArgs refuses CNI_ARGS that calico-ipam's ADD refuses. The error
// is CNI's own (`ARGS: unknown args [...]`), unwrapped, because its text
// is what a wrapper observes from the real binary.
func CheckAddArgs(args string) error {
	var a addArgs
	if err := types.LoadArgs(args, &a); err != nil {
		return err
	}
	if a.IP != nil {
		return errRequestedIP
	}
	return nil
}

// CheckDelArgs refuses CNI_ARGS that calico-ipam's DEL refuses.
func CheckDelArgs(args string) error {
	var a delArgs
	return types.LoadArgs(args, &a)
}
