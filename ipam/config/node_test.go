package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// Issue 22: the node settings fill in what the network config leaves
// out (takeover: Calico's config names none), never what it says.
func TestParseOnNode(t *testing.T) {
	conf := func(ipam string) []byte {
		return []byte(`{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"calico","ipam":{"type":"calico-ipam"` + ipam + `}}`)
	}
	tests := []struct {
		name, node, ipam string
		handles, logFile string
		wantErr          string
	}{
		{"no file", "", "", HandlesContainer, DefaultLogFile, ""},
		{"the file fills in", `{"delegateHandles":"pod","logFile":""}`, "", HandlesPod, "", ""},
		{"the config wins", `{"delegateHandles":"pod"}`, `,"delegateHandles":"container"`, HandlesContainer, DefaultLogFile, ""},
		{"a bad value names the file", `{"delegateHandles":"name"}`, "", "", "", "node settings"},
		{"an unknown key", `{"delegate":{"type":"x"}}`, "", "", "", "is not one of"},
		{"not JSON", `{`, "", "", "", "must be a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.node != "" {
				if err := os.WriteFile(filepath.Join(dir, NodeSettingsFile), []byte(tt.node), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			c, err := ParseOnNode(conf(tt.ipam), dir)
			if tt.wantErr != "" {
				var cniErr *types.Error
				if !errors.As(err, &cniErr) || cniErr.Code != types.ErrInvalidNetworkConfig || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseOnNode = %v; want code 7 saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || c.DelegateHandles != tt.handles || c.LogFile != tt.logFile {
				t.Fatalf("ParseOnNode = %+v, %v; want handles %s, log %q", c, err, tt.handles, tt.logFile)
			}
			if strings.Contains(string(c.DelegateConfig("1.0.0", nil)), "delegateHandles") {
				t.Error("a node setting reached the delegate")
			}
		})
	}
}
