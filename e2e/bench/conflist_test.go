package bench

import (
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/invoke"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
)

// TestRuntimeArgsSatisfyCalicoIPAM turns bench's RuntimeConf into
// CNI_ARGS the way libcni does (invoke.Args from RuntimeConf.Args) and
// checks calico-ipam's ADD and DEL accept them, as they would a runtime's.
func TestRuntimeArgsSatisfyCalicoIPAM(t *testing.T) {
	rt := pod{containerID: "c1", name: "web-0"}.runtime()
	env := (&invoke.Args{PluginArgs: rt.Args}).AsEnv()
	var cniArgs string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "CNI_ARGS="); ok {
			cniArgs = v
		}
	}
	if !strings.HasPrefix(cniArgs, "IgnoreUnknown=1;") {
		t.Errorf("CNI_ARGS %q do not start with IgnoreUnknown=1", cniArgs)
	}
	for verb, check := range map[string]func(string) error{"ADD": calicosim.CheckAddArgs, "DEL": calicosim.CheckDelArgs} {
		if err := check(cniArgs); err != nil {
			t.Errorf("calico-ipam's %s refuses bench's CNI_ARGS %q: %v", verb, cniArgs, err)
		}
	}
}
