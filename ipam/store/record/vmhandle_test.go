package record

import (
	"strings"
	"testing"
)

func TestVMHandle(t *testing.T) {
	longNet := strings.Repeat("n", 90) // leaves room for no more than the hash
	tests := []struct {
		network, ns, name, want string
		fails                   bool
	}{
		{"k8s-pod-network", "default", "vm1", "k8s-pod-network.vmi.default.vm1", false},
		{"multus-net1", "default", "vm1", "multus-net1.vmi.default.vm1", false},
		{longNet, "default", strings.Repeat("v", 40), "", false},
		{"k8s-pod-network", "default", strings.Repeat("v", 120), "", true}, // Calico's plugin fails on it
	}
	for _, tt := range tests {
		got, err := VMHandle(tt.network, tt.ns, tt.name)
		switch {
		case tt.fails:
			if err == nil {
				t.Errorf("VMHandle(%s, %s, %s) = %s; want an error", tt.network, tt.ns, tt.name, got)
			}
		case err != nil:
			t.Errorf("VMHandle(%s, %s, %s): %v", tt.network, tt.ns, tt.name, err)
		case tt.want != "" && got != tt.want:
			t.Errorf("VMHandle = %s; want %s", got, tt.want)
		case tt.want == "" && (len(got) != vmHandleMax || !strings.HasPrefix(got, tt.network+".vmi._") || !SharedHandle(tt.network, got)):
			t.Errorf("long VMHandle = %s (%d bytes); want <network>.vmi._<hash>, 128 bytes", got, len(got))
		}
	}
}
