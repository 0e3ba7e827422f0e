package calicosim

import (
	"testing"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// TestUnknownArgsNeedIgnoreUnknown: like calico-ipam, the simulator
// refuses CNI_ARGS keys its verb does not know unless IgnoreUnknown is
// true, and a refused command changes nothing in etcd.
func TestUnknownArgsNeedIgnoreUnknown(t *testing.T) {
	s := newSim(t, poolSpec{"p", "10.244.0.0/16", 26})
	const podKeys = "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=c1"
	tests := []struct {
		name      string
		verb      string
		args      string
		wantError string
	}{
		{"ADD: pod keys without IgnoreUnknown", "ADD", podKeys,
			`ARGS: unknown args ["K8S_POD_NAMESPACE=default" "K8S_POD_NAME=web-0" "K8S_POD_INFRA_CONTAINER_ID=c1"]`},
		{"ADD: IgnoreUnknown=0 is not enough", "ADD", "IgnoreUnknown=0;" + podKeys, "ARGS: unknown args"},
		{"ADD: IgnoreUnknown=1", "ADD", "IgnoreUnknown=1;" + podKeys, ""},
		{"ADD: IgnoreUnknown=true", "ADD", "IgnoreUnknown=true;" + podKeys + ";K8S_POD_UID=u1", ""},
		{"ADD: no args at all", "ADD", "", ""},
		{"ADD: a pair without a value", "ADD", "IgnoreUnknown=1;K8S_POD_NAME", `ARGS: invalid pair "K8S_POD_NAME"`},
		{"ADD: a requested IP", "ADD", "IgnoreUnknown=1;IP=10.244.0.9", "CNI_ARGS IP (a requested address) is not supported"},
		{"ADD: a bad IP", "ADD", "IP=10.244", "ARGS: error parsing value of pair"},
		{"DEL: pod keys are Calico's own", "DEL", podKeys, ""},
		{"DEL: K8S_POD_UID without IgnoreUnknown", "DEL", podKeys + ";K8S_POD_UID=u1", `ARGS: unknown args ["K8S_POD_UID=u1"]`},
		{"DEL: K8S_POD_UID with IgnoreUnknown=1", "DEL", "IgnoreUnknown=1;" + podKeys + ";K8S_POD_UID=u1", ""},
	}
	plugin := s.plugin(ModernHandles)
	verbs := map[string]func(*skel.CmdArgs) error{
		"ADD": func(a *skel.CmdArgs) error { _, err := plugin.Allocate(a); return err },
		"DEL": plugin.Del,
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.reset(t, poolSpec{"p", "10.244.0.0/16", 26})
			held := s.mustAdd(ModernHandles, pod{container: "held"})
			// ADD is for a new container, DEL for the one holding an address.
			target := map[string]string{"ADD": "c1", "DEL": "held"}[tt.verb]
			args := pod{container: target}.args(s.conf(nil))
			args.Args = tt.args
			if !refused(t, verbs[tt.verb](args), tt.wantError) {
				return
			}
			if _, ok := s.state().Lookup(held.Addr()); !ok {
				t.Errorf("a refused %s released %s", tt.verb, held.Addr())
			}
			if s.value(calico.HandleKey(network+".c1")) != "" {
				t.Errorf("a refused %s left a handle for c1", tt.verb)
			}
		})
	}
}
