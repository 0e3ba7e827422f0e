package admin_test

import (
	"io"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
)

// One liveness source at most, and the one named is the one read.
func TestLivenessFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr bool
		want    liveness.Source
	}{
		{"default cache", []string{"--node", "n1"}, false, liveness.CNICache{Dir: liveness.DefaultCNICache, Node: "n1"}},
		{"no source", []string{"--node", "n1", "--cni-cache="}, false, nil},
		{"runtime", []string{"--node", "n1", "--cri-endpoint", "unix:///run/containerd/containerd.sock"}, false,
			liveness.CRI{Endpoint: "unix:///run/containerd/containerd.sock", Node: "n1"}},
		{"file", []string{"--node", "n1", "--live", "live.json"}, false, liveness.File{Path: "live.json", Node: "n1"}},
		{"runtime and cache", []string{"--node", "n1", "--cri-endpoint", "/run/c.sock", "--cni-cache", "/var/lib/cni/results"}, true, nil},
		{"runtime and file", []string{"--node", "n1", "--cri-endpoint", "/run/c.sock", "--live", "live.json"}, true, nil},
		{"runtime for every node", []string{"--node", "", "--cri-endpoint", "/run/c.sock"}, true, nil},
		{"pods API", []string{"--node", "n1", "--kubeconfig", "/etc/kubernetes/admin.conf"}, false,
			liveness.Pods{Kubeconfig: "/etc/kubernetes/admin.conf", Node: "n1"}},
		{"pods API and runtime", []string{"--node", "n1", "--kubeconfig", "kc", "--cri-endpoint", "/run/c.sock"}, true, nil},
		{"pods API and file", []string{"--node", "n1", "--kubeconfig", "kc", "--live", "live.json"}, true, nil},
		{"pods API and cache", []string{"--node", "n1", "--kubeconfig", "kc", "--cni-cache", "/var/lib/cni/results"}, true, nil},
		{"pods API for every node", []string{"--node", "", "--kubeconfig", "kc"}, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calico := &admin.Datastores{}
			live := admin.NewLiveness(calico.Place)
			cmd := admin.NewCommand("test", "", io.Discard, calico, live)
			err := cmd.Parse(tt.args)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parse: %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got := live.Source(); got != tt.want {
				t.Fatalf("source %#v, want %#v", got, tt.want)
			}
		})
	}
}

// Every row of liveness.Kinds can be named, and builds its source: a new
// source needs no change here.
func TestEveryKindCanBeNamed(t *testing.T) {
	for _, k := range liveness.Kinds() {
		t.Run(k.Flag, func(t *testing.T) {
			calico := &admin.Datastores{}
			live := admin.NewLiveness(calico.Place)
			cmd := admin.NewCommand("test", "", io.Discard, calico, live)
			if err := cmd.Parse([]string{"--node", "n1", "--" + k.Flag, "/some/where"}); err != nil {
				t.Fatalf("parse: %v", err)
			}
			if got, want := live.Source(), k.New("/some/where", "n1"); got != want || !live.Explicit() {
				t.Fatalf("source %#v (explicit %v), want %#v", got, live.Explicit(), want)
			}
		})
	}
}
