package etcdtls

import (
	"strings"
	"testing"
)

// Issue 20, finding 8: plain-text or unverified etcd is said, naming the
// endpoint or the setting that would fix it.
func TestExposure(t *testing.T) {
	ca := Files{CA: File{Path: "/etc/calico/ca.pem", Setting: "etcd_ca_cert_file"}}
	noCA := Files{CA: File{Setting: "etcd_ca_cert_file"}}
	tests := []struct {
		name      string
		endpoints []string
		files     Files
		want      []string // "" when nothing is exposed
	}{
		{"https with a CA", []string{"https://10.0.0.10:2379", "https://10.0.0.11:2379"}, ca, nil},
		{"plain http", []string{"http://10.0.0.10:2379"}, Files{}, []string{"http://10.0.0.10:2379", "plain text"}},
		{"one endpoint plain", []string{"https://10.0.0.10:2379", "http://10.0.0.11:2379"}, ca, []string{"http://10.0.0.11:2379"}},
		{"https without a CA file", []string{"https://10.0.0.10:2379"}, noCA, []string{"etcd_ca_cert_file", "system's roots"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Exposure(tt.endpoints, tt.files)
			if (got == "") != (tt.want == nil) {
				t.Fatalf("Exposure = %q; want exposure %v", got, tt.want != nil)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("Exposure = %q; want it to name %q", got, w)
				}
			}
			if strings.Contains(got, "https://10.0.0.10") && tt.name != "https without a CA file" {
				t.Errorf("Exposure = %q names a protected endpoint", got)
			}
		})
	}
}
