package testbed

import (
	"net/netip"
	"slices"
	"testing"
)

func TestParseAddrLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		want []netip.Prefix
	}{
		{"empty", "", nil},
		{"one", "2: eth0    inet 10.244.0.1/29 brd 10.244.0.7 scope global eth0\\       valid_lft forever preferred_lft forever\n",
			[]netip.Prefix{netip.MustParsePrefix("10.244.0.1/29")}},
		{"two", "2: eth0    inet 10.244.0.1/29 scope global eth0\n3: net1    inet 10.245.0.2/24 scope global net1\n",
			[]netip.Prefix{netip.MustParsePrefix("10.244.0.1/29"), netip.MustParsePrefix("10.245.0.2/24")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAddrLines(tc.out)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("parseAddrLines = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestVethNames(t *testing.T) {
	out := "2: eth0@if7: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500\n3: eth0-stub@eth0: <BROADCAST> mtu 1500\n"
	if got, want := vethNames(out), []string{"eth0", "eth0-stub"}; !slices.Equal(got, want) {
		t.Errorf("vethNames = %v, want %v", got, want)
	}
}

func TestCnitoolError(t *testing.T) {
	stderr := "Error: plugin type=\"ptp\" failed (add): no more free IPs\nUsage:\n  cnitool add <network-name> <netns> [flags]\n"
	if got, want := cnitoolError(stderr), `plugin type="ptp" failed (add): no more free IPs`; got != want {
		t.Errorf("cnitoolError = %q, want %q", got, want)
	}
}

// The container ID must match cnitool's own derivation, or GC's valid
// list would name attachments that do not exist.
func TestContainerIDMatchesCnitool(t *testing.T) {
	sb := Sandbox{Netns: Netns{Name: "x"}}
	if got := sb.ContainerID(); len(got) != len("cnitool-")+20 || got[:8] != "cnitool-" {
		t.Errorf("ContainerID = %q", got)
	}
	if sb.cniArgs() != "IgnoreUnknown=1" {
		t.Errorf("a sandbox without a pod sends pod identity: %q", sb.cniArgs())
	}
	sb.Pod = Pod{Namespace: "default", Name: "web-0"}
	if want := "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=" + sb.ContainerID(); sb.cniArgs() != want {
		t.Errorf("cniArgs = %q, want %q", sb.cniArgs(), want)
	}
}
