package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
)

// The CNI binary runs on every pod start and stop, and pays every linked
// package's init each time: it must link none of the admin commands, nor
// the Kubernetes and CRI clients they bring; and, but for safe-ipam-etcd,
// which the calls over etcd are handed to, not the etcd client, gRPC or
// protobuf either.
func TestCNIBuildLinksOnlyWhatCNICallsNeed(t *testing.T) {
	admin := []string{"/ipam/admin/audit", "/ipam/admin/adopt", "/ipam/admin/gc", "/ipam/admin/install", "/ipam/admin/doctor", "/ipam/admin", "/ipam/admin/liveness",
		"k8s.io/client-go/", "k8s.io/cri-api/", "github.com/fsnotify/"}
	etcd := []string{"go.etcd.io/", "google.golang.org/grpc", "google.golang.org/protobuf", "github.com/gogo/protobuf", "github.com/golang/protobuf",
		"/ipam/etcdconn", "/ipam/etcdrange", "/ipam/store/etcdstore", "/ipam/store/opener", "/ipam/calico/etcdread", "/ipam/cni/lookup/etcdlookup"}
	for _, tc := range []struct {
		pkg    string
		banned []string
	}{
		// debug/buildinfo is the build mark's scan (cninode.IsSafeIPAM),
		// which only install, uninstall and doctor run.
		{".", append(append(admin, etcd...), "debug/buildinfo")},
		{"../safe-ipam-etcd", admin},
	} {
		for _, dep := range deps(t, tc.pkg) {
			for _, pkg := range tc.banned {
				if strings.Contains(dep+"/", pkg+"/") || strings.HasPrefix(dep, pkg) {
					t.Errorf("the CNI build %s links %s", tc.pkg, dep)
				}
			}
		}
	}
}

// deps lists the packages pkg links, with the build's extra flags.
func deps(t *testing.T, pkg string, flags ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append(append([]string{"list"}, flags...), "-deps", pkg)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

// The release build (make build, make image, make bench) sets gRPC's
// grpcnotrace tag, so that safe-ipam-etcd does not initialise request
// tracing it never turns on: golang.org/x/net/trace and the html/template
// it brings.
func TestReleaseBuildLinksNoGRPCTracing(t *testing.T) {
	for _, pkg := range []string{".", "../safe-ipam-etcd"} {
		for _, dep := range deps(t, pkg, "-tags", "grpcnotrace") {
			if dep == "golang.org/x/net/trace" || dep == "html/template" {
				t.Errorf("the release build of %s links %s", pkg, dep)
			}
		}
	}
}

// safe-ipam (the CNI build) answers version itself and hands the other
// admin commands to safe-ipam-admin beside it, with their exit codes.
func TestCNIBuildHandsAdminCommandsToSafeIPAMAdmin(t *testing.T) {
	dir := t.TempDir()
	if err := (gobuild.Build{Out: dir + "/", Pkgs: []string{".", "../safe-ipam-admin"}}).Run(context.Background()); err != nil {
		t.Fatalf("building: %v", err)
	}
	run := func(args ...string) (int, string) {
		cmd := exec.Command(filepath.Join(dir, "safe-ipam"), args...)
		cmd.Env = append(os.Environ(), "CNI_COMMAND=")
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	// install and doctor must recognise the CNI build, which does not link
	// package install, on a node.
	for _, name := range []string{"safe-ipam", "safe-ipam-admin"} {
		if ok, err := cninode.IsSafeIPAM(filepath.Join(dir, name)); !ok || err != nil {
			t.Errorf("%s is not recognised as safe-ipam (%v)", name, err)
		}
	}
	if code, out := run("version"); code != 0 || !strings.Contains(out, "safe-ipam") {
		t.Fatalf("version: exit %d, %s", code, out)
	}
	if code, out := run("audit", "-h"); code != 0 || !strings.Contains(out, "Usage: safe-ipam audit") {
		t.Fatalf("audit -h through safe-ipam-admin: exit %d, %s", code, out)
	}
	if code, out := run("doctor", "--bogus"); code != 2 || !strings.Contains(out, "bogus") {
		t.Fatalf("a bad flag through safe-ipam-admin: exit %d, %s", code, out)
	}
	// A runtime pointed at the admin binary gets a CNI error naming the
	// binary it must run, not an admin command's usage.
	cmd := exec.Command(filepath.Join(dir, "safe-ipam-admin"))
	cmd.Env = append(os.Environ(), "CNI_COMMAND=ADD")
	if out, _ := cmd.Output(); cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), `"code": 50`) || !strings.Contains(string(out), "must run safe-ipam") {
		t.Errorf("safe-ipam-admin with CNI_COMMAND=ADD: exit %d, %s; want CNI error 50 naming safe-ipam", cmd.ProcessState.ExitCode(), out)
	}
	if err := os.Remove(filepath.Join(dir, "safe-ipam-admin")); err != nil {
		t.Fatal(err)
	}
	if code, out := run("audit"); code != 2 || !strings.Contains(out, "safe-ipam-admin") {
		t.Fatalf("without safe-ipam-admin: exit %d, %s; want 2 naming it", code, out)
	}
}
