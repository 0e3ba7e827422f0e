package calicosim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// buildSimulator compiles e2e/cmd/calico-ipam into a temporary CNI bin dir.
func buildSimulator(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "calico-ipam")
	build := gobuild.Build{Out: bin, Pkgs: []string{"github.com/safe-ipam/safe-ipam/e2e/cmd/calico-ipam"}}
	if err := build.Run(context.Background()); err != nil {
		t.Fatalf("building calico-ipam: %v", err)
	}
	return bin
}

type invocation struct {
	command string
	pod     pod
	conf    []byte
	env     []string
}

type outcome struct {
	stdout, stderr string
	exit           int
}

func runBinary(t *testing.T, bin string, inv invocation) outcome {
	t.Helper()
	o, err := execBinary(bin, inv)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// execBinary runs the simulator binary once; an error means it could not
// run, not that it failed.
func execBinary(bin string, inv invocation) (outcome, error) {
	cmd := exec.Command(bin)
	cmd.Env = append([]string{
		"CNI_COMMAND=" + inv.command,
		"CNI_CONTAINERID=" + inv.pod.container,
		"CNI_NETNS=/var/run/netns/does-not-exist",
		"CNI_IFNAME=eth0",
		"CNI_PATH=" + filepath.Dir(bin),
		"PATH=" + os.Getenv("PATH"),
	}, inv.env...)
	if inv.pod.name != "" {
		cmd.Env = append(cmd.Env, "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE="+inv.pod.namespace+";K8S_POD_NAME="+inv.pod.name)
	}
	cmd.Stdin = bytes.NewReader(inv.conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return outcome{}, fmt.Errorf("running %s: %w", bin, err)
	}
	return outcome{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}, nil
}

// cniError is the error JSON a CNI plugin prints on failure.
type cniError struct {
	CNIVersion string `json:"cniVersion"`
	Code       int    `json:"code"`
	Msg        string `json:"msg"`
}

// TestBinaryWireBehaviour runs the simulator as a real CNI plugin.
func TestBinaryWireBehaviour(t *testing.T) {
	bin := buildSimulator(t)
	s := newSim(t, poolSpec{"default-ipv4-ippool", "10.244.0.0/16", 26})
	lock := filepath.Join(t.TempDir(), "calico", "ipam.lock")
	lockEnv := []string{EnvLockFile + "=" + lock}
	web0 := pod{"c0", "default", "web-0"}
	v := func(version string) []byte { return s.conf(map[string]any{"cniVersion": version}) }

	tests := []struct {
		name  string
		inv   invocation
		exit  int
		check func(t *testing.T, o outcome)
	}{
		{"VERSION answers as calico-ipam does", invocation{command: "VERSION"}, 0, func(t *testing.T, o outcome) {
			const want = `{"cniVersion":"1.1.0","supportedVersions":["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0"]}`
			if got := strings.TrimSpace(o.stdout); got != want {
				t.Errorf("VERSION printed %s, want %s", got, want)
			}
		}},
		{"ADD 1.0.0 prints the block mask and a route to the block", invocation{"ADD", web0, v("1.0.0"), lockEnv}, 0, func(t *testing.T, o outcome) {
			var r struct {
				CNIVersion string           `json:"cniVersion"`
				IPs        []map[string]any `json:"ips"`
				Routes     []map[string]any `json:"routes"`
			}
			mustJSON(t, o.stdout, &r)
			wantIPs := []map[string]any{{"address": "10.244.0.0/26"}}
			wantRoutes := []map[string]any{{"dst": "10.244.0.0/26"}}
			if r.CNIVersion != "1.0.0" || !jsonEqual(r.IPs, wantIPs) || !jsonEqual(r.Routes, wantRoutes) {
				t.Errorf("result %s", o.stdout)
			}
			if _, err := os.Stat(lock); err != nil {
				t.Errorf("lock file: %v", err)
			}
		}},
		{"ADD 0.3.1 converts the result", invocation{"ADD", pod{container: "c1"}, v("0.3.1"), lockEnv}, 0, func(t *testing.T, o outcome) {
			var r struct {
				CNIVersion string `json:"cniVersion"`
				IPs        []struct{ Version, Address string }
			}
			mustJSON(t, o.stdout, &r)
			if r.CNIVersion != "0.3.1" || len(r.IPs) != 1 || r.IPs[0].Version != "4" || r.IPs[0].Address != "10.244.0.1/26" {
				t.Errorf("result %s", o.stdout)
			}
		}},
		{"ADD 0.2.0 converts the result", invocation{"ADD", pod{container: "c2"}, v("0.2.0"), lockEnv}, 0, func(t *testing.T, o outcome) {
			var r struct {
				IP4 struct {
					IP     string
					Routes []struct{ Dst string }
				}
			}
			mustJSON(t, o.stdout, &r)
			if r.IP4.IP != "10.244.0.2/26" || len(r.IP4.Routes) != 1 || r.IP4.Routes[0].Dst != "10.244.0.0/26" {
				t.Errorf("result %s", o.stdout)
			}
		}},
		{"ADD 1.1.0 is an incompatible version", invocation{"ADD", pod{container: "c3"}, v("1.1.0"), lockEnv}, 1, func(t *testing.T, o outcome) {
			wantError(t, o, 1, "incompatible CNI versions")
		}},
		{"CHECK succeeds silently", invocation{"CHECK", web0, v("1.0.0"), lockEnv}, 0, func(t *testing.T, o outcome) {
			if o.stdout != "" {
				t.Errorf("stdout %q, want nothing", o.stdout)
			}
		}},
		{"DEL succeeds silently and releases", invocation{"DEL", web0, v("1.0.0"), lockEnv}, 0, func(t *testing.T, o outcome) {
			if o.stdout != "" {
				t.Errorf("stdout %q, want nothing", o.stdout)
			}
			if s.value(calico.HandleKey(network+".c0")) != "" {
				t.Error("handle still exists after DEL")
			}
		}},
		{"DEL again succeeds", invocation{"DEL", web0, v("1.0.0"), lockEnv}, 0, nil},
		{"missing Node", invocation{"ADD", pod{container: "c4"}, s.conf(map[string]any{"nodename": "node9"}), lockEnv}, 1, func(t *testing.T, o outcome) {
			wantError(t, o, 999, "resource does not exist: Node(node9)")
		}},
		{"kubernetes datastore without a kubeconfig, outside a pod", invocation{"ADD", pod{container: "c5"}, s.conf(map[string]any{"datastore_type": "kubernetes"}), lockEnv}, 1, func(t *testing.T, o outcome) {
			wantError(t, o, 999, `kubernetes datastore: loading kubeconfig "": unable to load in-cluster configuration`)
		}},
		{"inferred kubernetes datastore", invocation{"ADD", pod{container: "c5"}, s.conf(map[string]any{"datastore_type": nil, "etcd_endpoints": nil, "kubernetes": map[string]any{"kubeconfig": "/nonexistent/kubeconfig"}}), lockEnv}, 1, func(t *testing.T, o outcome) {
			wantError(t, o, 999, `kubernetes datastore: loading kubeconfig "/nonexistent/kubeconfig"`)
		}},
		{"ADD refuses unknown CNI_ARGS without IgnoreUnknown", invocation{"ADD", pod{container: "c8"}, v("1.0.0"), append([]string{"CNI_ARGS=K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-8"}, lockEnv...)}, 1, func(t *testing.T, o outcome) {
			wantError(t, o, 999, `ARGS: unknown args ["K8S_POD_NAMESPACE=default" "K8S_POD_NAME=web-8"]`)
			if s.value(calico.HandleKey(network+".c8")) != "" {
				t.Error("the refused ADD left a handle")
			}
		}},
		{"DEL refuses unknown CNI_ARGS without IgnoreUnknown", invocation{"DEL", pod{container: "c8"}, v("1.0.0"), append([]string{"CNI_ARGS=K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-8;K8S_POD_UID=u8"}, lockEnv...)}, 1, func(t *testing.T, o outcome) {
			wantError(t, o, 999, `ARGS: unknown args ["K8S_POD_UID=u8"]`)
		}},
		{"legacy handles from the environment", invocation{"ADD", pod{"c6", "default", "web-1"}, v("1.0.0"), append([]string{EnvHandles + "=legacy"}, lockEnv...)}, 0, func(t *testing.T, o outcome) {
			if s.value(calico.HandleKey("default.web-1")) == "" {
				t.Error("no handle default.web-1")
			}
		}},
		{"unknown handle mode", invocation{"ADD", pod{container: "c7"}, v("1.0.0"), append([]string{EnvHandles + "=v9"}, lockEnv...)}, 1, func(t *testing.T, o outcome) {
			wantError(t, o, 999, `CALICO_SIM_HANDLES="v9"`)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := runBinary(t, bin, tt.inv)
			if o.exit != tt.exit {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", o.exit, tt.exit, o.stdout, o.stderr)
			}
			if tt.check != nil {
				tt.check(t, o)
			}
		})
	}
}

func mustJSON(t *testing.T, data string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(data))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, data)
	}
	if dec.More() {
		t.Fatalf("stdout carries more than one JSON value:\n%s", data)
	}
}

func wantError(t *testing.T, o outcome, code int, msg string) {
	t.Helper()
	var e cniError
	mustJSON(t, o.stdout, &e)
	if e.Code != code || !strings.Contains(e.Msg, msg) {
		t.Errorf("error %+v, want code %d and message containing %q", e, code, msg)
	}
}

func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
