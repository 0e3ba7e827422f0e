package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
)

// binDir holds safe-ipam, safe-ipam-etcd (which safe-ipam hands the calls
// over etcd to) and host-local, built once for the package.
var binDir string

func TestMain(m *testing.M) {
	gobuild.Main(m, &binDir, ".", "../safe-ipam-etcd", "github.com/containernetworking/plugins/plugins/ipam/host-local")
}

type binaryCall struct {
	command, containerID, ifName, args string
	conf                               string
}

type outcome struct {
	stdout []byte
	err    error
}

func (inv binaryCall) run(t *testing.T) outcome {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "safe-ipam"))
	cmd.Env = []string{"CNI_COMMAND=" + inv.command, "CNI_CONTAINERID=" + inv.containerID, "CNI_NETNS=/var/run/netns/x",
		"CNI_IFNAME=" + inv.ifName, "CNI_ARGS=" + inv.args, "CNI_PATH=" + binDir}
	cmd.Stdin = strings.NewReader(inv.conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if testing.Verbose() {
		t.Logf("stderr: %s", stderr.String())
	}
	return outcome{stdout: stdout.Bytes(), err: err}
}

// hostLocalConf fronts host-local, a real IPAM plugin with CNI 1.1.0.
func hostLocalConf(t *testing.T, version, ipamExtra string) string {
	state := t.TempDir()
	return fmt.Sprintf(`{"cniVersion":%q,"name":"net1","type":"ptp","ipam":{"type":"safe-ipam","delegate":{"type":"host-local"},
		"store":{"type":"file","dir":%q},"cacheDir":%q,"logFile":"","dataDir":%q,
		"ranges":[[{"subnet":"10.9.0.0/24"}]]%s}}`, version, filepath.Join(state, "records"), filepath.Join(state, "cache"), filepath.Join(state, "host-local"), ipamExtra)
}

func TestBadInputGetsCNIErrorAndChangesNothing(t *testing.T) {
	good := "K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0"
	tests := []struct {
		name      string
		inv       func(conf string) binaryCall
		ipamExtra string
		rawConf   string
		wantCode  int
		wantInMsg string
	}{
		{"malformed JSON", func(string) binaryCall { return binaryCall{"ADD", "c1", "eth0", good, `{"cniVersion":"1.0.0",`} }, "", "", 6, ""},
		{"unknown delegateHandles", nil, `,"delegateHandles":"podname"`, "", 7, "ipam.delegateHandles"},
		{"unknown store type", nil, `,"store":{"type":"sql"}`, "", 7, "ipam.store"},
		{"invalid container ID", func(c string) binaryCall { return binaryCall{"ADD", "../c1", "eth0", good, c} }, "", "", 4, "containerID"},
		{"ifname too long", func(c string) binaryCall { return binaryCall{"ADD", "c1", "eth0123456789012", good, c} }, "", "", 4, "interface name"},
		{"ifname with slash", func(c string) binaryCall { return binaryCall{"ADD", "c1", "a/b", good, c} }, "", "", 4, "interface name"},
		{"ifname dot dot", func(c string) binaryCall { return binaryCall{"DEL", "c1", "..", good, c} }, "", "", 4, "interface name"},
		{"CNI_ARGS do not parse", func(c string) binaryCall { return binaryCall{"ADD", "c1", "eth0", "K8S_POD_NAME", c} }, "", "", 4, "CNI_ARGS"},
		{"missing delegate", nil, `,"delegate":{"type":"calico-ipam"}`, "", 50, "calico-ipam"},
		{"unreachable etcd store", nil, `,"store":{"type":"etcd","endpoints":["http://127.0.0.1:1"],"dialTimeout":"300ms"}`, "", 11, "record store"},
		{"unsupported CNI version", func(string) binaryCall {
			return binaryCall{"ADD", "c1", "eth0", good, `{"cniVersion":"0.2.0","name":"n","type":"ptp","ipam":{"type":"safe-ipam"}}`}
		}, "", "", 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf := hostLocalConf(t, "1.0.0", "")
			if tt.ipamExtra != "" {
				// later keys win in Go's decoder, so the override sits at the end
				conf = hostLocalConf(t, "1.0.0", tt.ipamExtra)
			}
			inv := binaryCall{"ADD", "c1", "eth0", good, conf}
			if tt.inv != nil {
				inv = tt.inv(conf)
			}
			out := inv.run(t)
			if out.err == nil {
				t.Fatalf("exit 0; stdout %s", out.stdout)
			}
			var cniErr struct {
				Code int    `json:"code"`
				Msg  string `json:"msg"`
			}
			if err := json.Unmarshal(out.stdout, &cniErr); err != nil {
				t.Fatalf("stdout is not a CNI error: %q", out.stdout)
			}
			if cniErr.Code != tt.wantCode || !strings.Contains(cniErr.Msg, tt.wantInMsg) {
				t.Errorf("error = %d %q; want code %d naming %q", cniErr.Code, cniErr.Msg, tt.wantCode, tt.wantInMsg)
			}
			assertNothingAllocated(t, inv.conf)
		})
	}
}

// assertNothingAllocated: no record and no host-local lease exist
// (host-local keeps a last_reserved_ip cursor, which is not a lease).
func assertNothingAllocated(t *testing.T, conf string) {
	t.Helper()
	var c struct {
		IPAM struct {
			Store   struct{ Dir string } `json:"store"`
			DataDir string               `json:"dataDir"`
		} `json:"ipam"`
	}
	if json.Unmarshal([]byte(conf), &c) != nil {
		return // a config that does not parse names no state
	}
	for _, dir := range []string{c.IPAM.Store.Dir, c.IPAM.DataDir} {
		if dir == "" {
			continue
		}
		var files []string
		_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() && !strings.HasPrefix(info.Name(), ".") && info.Name() != "lock" && !strings.HasPrefix(info.Name(), "last_reserved_ip") {
				files = append(files, p)
			}
			return nil
		})
		if len(files) != 0 {
			t.Errorf("state left in %s: %v", dir, files)
		}
	}
}

// Every verb through the binary, with a 1.1.0 delegate that gets GC and
// STATUS forwarded.
func TestVerbsThroughTheBinary(t *testing.T) {
	conf := hostLocalConf(t, "1.1.0", "")
	add := binaryCall{"ADD", "c1", "eth0", "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0", conf}.run(t)
	if add.err != nil {
		t.Fatalf("ADD: %v %s", add.err, add.stdout)
	}
	var res struct {
		CNIVersion string `json:"cniVersion"`
		IPs        []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(add.stdout, &res); err != nil || res.CNIVersion != "1.1.0" || len(res.IPs) != 1 {
		t.Fatalf("ADD result %s", add.stdout)
	}
	var m map[string]any
	_ = json.Unmarshal([]byte(conf), &m)
	var prev any
	_ = json.Unmarshal(add.stdout, &prev)
	m["prevResult"] = prev
	withPrev, _ := json.Marshal(m)
	if out := (binaryCall{"CHECK", "c1", "eth0", "", string(withPrev)}).run(t); out.err != nil {
		t.Fatalf("CHECK: %v %s", out.err, out.stdout)
	}
	if out := (binaryCall{"STATUS", "", "", "", conf}).run(t); out.err != nil {
		t.Fatalf("STATUS: %v %s", out.err, out.stdout)
	}
	m["cni.dev/valid-attachments"] = []any{}
	delete(m, "prevResult")
	gc, _ := json.Marshal(m)
	if out := (binaryCall{"GC", "", "", "", string(gc)}).run(t); out.err != nil {
		t.Fatalf("GC: %v %s", out.err, out.stdout)
	}
	assertNothingAllocated(t, conf)
	if out := (binaryCall{"DEL", "c1", "eth0", "", conf}).run(t); out.err != nil {
		t.Fatalf("DEL after GC: %v %s", out.err, out.stdout)
	}
}
