package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/ipam/cninode"
)

// The CNI binary runs on every pod start and stop, and pays every linked
// package's init each time: it must link none of the admin commands, nor
// the Kubernetes and CRI clients they bring.
func TestCNIBuildLinksOnlyWhatCNICallsNeed(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range []string{"/ipam/audit", "/ipam/adopt", "/ipam/gc", "/ipam/install", "/ipam/doctor", "/ipam/admin", "/ipam/liveness",
		"k8s.io/client-go/", "k8s.io/cri-api/", "github.com/fsnotify/"} {
		for _, dep := range strings.Fields(string(out)) {
			if strings.Contains(dep+"/", pkg+"/") || strings.HasPrefix(dep, pkg) {
				t.Errorf("the CNI build links %s", dep)
				break
			}
		}
	}
}

// The release build (make build, make image, make bench) sets gRPC's
// grpcnotrace tag, so that the CNI binary does not initialise request
// tracing it never turns on: golang.org/x/net/trace and the html/template
// it brings.
func TestReleaseBuildLinksNoGRPCTracing(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "grpcnotrace", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "golang.org/x/net/trace" || dep == "html/template" {
			t.Errorf("the release CNI build links %s", dep)
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
