package audit_test

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
)

// --kubeconfig: the pods bound to the node, read from a real
// kube-apiserver by a user holding deploy/'s ClusterRole, are what should
// run. A Calico 2.x pod-name handle (written by the simulator into real
// etcd) is never releasable from them: Calico 2.x wrote no owner node, and
// the pods bound to node1 say nothing of a pod on node2 that borrowed the
// address (issue 41, item 2.2); whether its pod runs or not, it is kept;
// an API server that is down or a user without the role is exit 2, and
// repair --apply then changes nothing.
func TestKubeconfigPodsAsLiveness(t *testing.T) {
	srv := kubetest.Start(t)
	if err := srv.Apply(filepath.Join("..", "..", "..", "deploy", "safe-ipam-rbac.yaml")); err != nil {
		t.Fatal(err)
	}
	user := func(name, role string) string {
		cfg, err := srv.User(name, role)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	withRole := user("audit", "safe-ipam")
	tests := []struct {
		name       string
		kubeconfig string
		podRuns    bool
		wantCode   int
		releasable bool
	}{
		{"the pod is gone from node1", withRole, false, audit.ExitFindings, false},
		{"the pod runs", withRole, true, audit.ExitFindings, false},
		{"no role bound", user("norole", ""), false, audit.ExitError, false},
		{"API server down", kubetest.Repoint(t, withRole, "https://127.0.0.1:1"), false, audit.ExitError, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			ns := fmt.Sprintf("audit-%d", i)
			ip := w.simAdd(calicosim.LegacyHandles, "v2era", ns, "web-0")
			// Another pod on the node: an empty list is not trusted while
			// the node holds addresses.
			if _, err := srv.RunPod(ns, "db-0", "node1"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.DeletePod(ns, "db-0") })
			if tt.podRuns {
				if _, err := srv.RunPod(ns, "web-0", "node1", ip); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = srv.DeletePod(ns, "web-0") })
			}
			code, rep, stderr := w.run(false, "--kubeconfig", tt.kubeconfig, "--min-age", "0")
			if code != tt.wantCode {
				t.Fatalf("audit exit %d, want %d\n%s", code, tt.wantCode, stderr)
			}
			if code == audit.ExitError {
				before := w.dump()
				code, _, stderr := w.run(true, "--kubeconfig", tt.kubeconfig, "--min-age", "0", "--apply")
				if code != audit.ExitError || !reflect.DeepEqual(before, w.dump()) {
					t.Fatalf("repair exit %d (want 2) or etcd changed\n%s", code, stderr)
				}
				if !strings.Contains(stderr, "pods API") {
					t.Errorf("stderr does not name the pods API: %s", stderr)
				}
				return
			}
			f := find(rep.Findings, audit.PodNameHandle)
			if f == nil || f.Handle != ns+".web-0" || f.Releasable != tt.releasable {
				t.Fatalf("findings %+v, liveness %q; want %s.web-0 releasable %v", rep.Findings, rep.Liveness, ns, tt.releasable)
			}
			if !strings.Contains(rep.Liveness, "pods API") {
				t.Errorf("liveness %q does not name the pods API", rep.Liveness)
			}
			code, rep, stderr = w.run(true, "--kubeconfig", tt.kubeconfig, "--min-age", "0", "--apply")
			snap, err := calicosim.State(context.Background(), w.cli())
			if err != nil {
				t.Fatal(err)
			}
			if held := len(snap.AllocationsOf(ns+".web-0")) == 1; held == tt.releasable {
				t.Fatalf("repair exit %d: %s held %v, want released %v; actions %+v refused %+v\n%s",
					code, ip, held, tt.releasable, rep.Actions, rep.Refused, stderr)
			}
		})
	}
}
