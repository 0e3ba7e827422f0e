package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// calicoConf is Calico's main plugin with the given ipam section, as the
// rendered cni_network_config has it.
func calicoConf(ipam string) string {
	return `{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"calico","etcd_endpoints":"http://e:2379","ipam":` + ipam + `}`
}

func TestDelegateFile(t *testing.T) {
	tests := []struct {
		name, conf         string
		wantType, wantFile string
	}{
		{"fronting calico-ipam", calicoConf(`{"type":"safe-ipam"}`), "calico-ipam", "calico-ipam"},
		// Installed as calico-ipam by `safe-ipam install --mode takeover`,
		// with Calico's conflist untouched: Calico's multi-call binary,
		// run as calico-ipam, is the delegate.
		{"taken over calico-ipam", calicoConf(`{"type":"calico-ipam"}`), "calico-ipam", "calico"},
		{"taken over, delegate named", calicoConf(`{"type":"calico-ipam","delegate":{"type":"calico-ipam"}}`), "calico-ipam", "calico"},
		{"taken over, binary given", calicoConf(`{"type":"calico-ipam","delegate":{"type":"calico-ipam","binary":"/opt/calico/calico"}}`), "calico-ipam", "/opt/calico/calico"},
		{"taken over, real one elsewhere", calicoConf(`{"type":"calico-ipam","delegate":{"type":"calico-ipam","binDir":"/opt/cni/calico"}}`), "calico-ipam", "calico-ipam"},
		{"another file for another type", calicoConf(`{"type":"safe-ipam","delegate":{"type":"calico-ipam","binary":"calico"}}`), "calico-ipam", "calico"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.conf))
			if err != nil {
				t.Fatal(err)
			}
			if c.Delegate.Type != tt.wantType || c.Delegate.File() != tt.wantFile {
				t.Errorf("delegate %q from file %q; want %q from %q", c.Delegate.Type, c.Delegate.File(), tt.wantType, tt.wantFile)
			}
			if !strings.Contains(string(c.DelegateConfig("1.0.0", nil)), `"ipam":{"type":"`+tt.wantType+`"}`) {
				t.Errorf("delegate config %s does not name %q as its ipam type", c.DelegateConfig("1.0.0", nil), tt.wantType)
			}
		})
	}
}

func TestDelegateFileRefusals(t *testing.T) {
	tests := []struct{ name, conf, field string }{
		{"relative path", calicoConf(`{"type":"safe-ipam","delegate":{"type":"calico-ipam","binary":"bin/calico"}}`), "ipam.delegate.binary"},
		{"path and binDir", calicoConf(`{"type":"safe-ipam","delegate":{"type":"calico-ipam","binary":"/b/calico","binDir":"/b"}}`), "ipam.delegate.binary"},
		{"binary is the plugin itself", calicoConf(`{"type":"calico-ipam","delegate":{"type":"calico-ipam","binary":"calico-ipam"}}`), "ipam.delegate"},
		{"other binary named like the plugin", calicoConf(`{"type":"safe-ipam","delegate":{"type":"calico-ipam","binary":"safe-ipam"}}`), "ipam.delegate.binary"},
		{"another type delegating to itself", calicoConf(`{"type":"host-local","delegate":{"type":"host-local"}}`), "ipam.delegate.type"},
		{"typo", calicoConf(`{"type":"calico-ipam","delegate":{"type":"calico-ipam","bin":"calico"}}`), "ipam.delegate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.conf))
			var cniErr *types.Error
			if !errors.As(err, &cniErr) || cniErr.Code != types.ErrInvalidNetworkConfig || !strings.Contains(cniErr.Msg, tt.field) {
				t.Fatalf("Parse = %v; want invalid config naming %s", err, tt.field)
			}
		})
	}
}
