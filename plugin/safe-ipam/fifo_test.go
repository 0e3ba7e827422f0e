package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// boundedCall runs one CNI call of the binary with a limit far above its
// 2s verbTimeout, failing the test when the call is still running then.
func boundedCall(t *testing.T, verb, containerID, conf string) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "safe-ipam"))
	cmd.Env = []string{"CNI_COMMAND=" + verb, "CNI_CONTAINERID=" + containerID, "CNI_NETNS=/var/run/netns/x", "CNI_IFNAME=eth0",
		"CNI_PATH=" + binDir}
	cmd.Stdin = strings.NewReader(conf)
	stdout, err := cmd.Output()
	if ctx.Err() != nil {
		t.Fatalf("%s %s still ran after 30s with a 2s verbTimeout", verb, containerID)
	}
	return outcome{stdout: stdout, err: err}
}

// Issue 42, item 2: a FIFO planted in safe-ipam's state (a record, the
// delegate version cache) holds no CNI call: each returns at once, with
// a CNI error naming the file where it needs the file, or as if the
// file were missing where it can do without (the version cache).
func TestAFIFOInTheStateHoldsNoCall(t *testing.T) {
	tests := []struct {
		name string
		// at is where the FIFO is planted, under the config's state.
		at func(records, cache string) string
		// verb and container are the call that meets it.
		verb, container string
		// wantErr is "" when the call must succeed.
		wantErr string
	}{
		{"the delegate version cache, at ADD", func(_, cache string) string { return filepath.Join(cache, "delegate-versions.json") }, "ADD", "c1", ""},
		{"the call's own record, at ADD", func(records, _ string) string { return filepath.Join(records, "net1", "c1:eth0") }, "ADD", "c1", "not a regular file"},
		{"the call's own record, at DEL", func(records, _ string) string { return filepath.Join(records, "net1", "c1:eth0") }, "DEL", "c1", "not a regular file"},
		{"another record, at GC", func(records, _ string) string { return filepath.Join(records, "net1", "c9:eth0") }, "GC", "", "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf := hostLocalConf(t, "1.1.0", `,"verbTimeout":"2s"`)
			var m struct {
				IPAM struct {
					Store    struct{ Dir string } `json:"store"`
					CacheDir string               `json:"cacheDir"`
				} `json:"ipam"`
			}
			if err := json.Unmarshal([]byte(conf), &m); err != nil {
				t.Fatal(err)
			}
			// A first pod makes the store and the cache as a node has them.
			if out := boundedCall(t, "ADD", "c0", conf); out.err != nil {
				t.Fatalf("ADD c0: %v %s", out.err, out.stdout)
			}
			fifo := tt.at(m.IPAM.Store.Dir, m.IPAM.CacheDir)
			_ = os.Remove(fifo)
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			if tt.verb == "GC" {
				conf = strings.Replace(conf, `"ipam"`, `"cni.dev/valid-attachments":[],"ipam"`, 1)
			}
			out := boundedCall(t, tt.verb, tt.container, conf)
			if tt.wantErr == "" {
				if out.err != nil {
					t.Fatalf("%s = %v %s; want success (the FIFO read as a missing file)", tt.verb, out.err, out.stdout)
				}
				return
			}
			if _, msg := cniError(t, out); !strings.Contains(msg, tt.wantErr) || !strings.Contains(msg, filepath.Base(fifo)) {
				t.Fatalf("%s = %q; want an error naming %s: %s", tt.verb, msg, fifo, tt.wantErr)
			}
		})
	}
}
