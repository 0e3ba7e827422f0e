package delegate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
)

// TestMain lets the test binary, linked as "calico", act as a multi-call
// plugin that picks its role from the base of argv[0], as Calico's does
// (a shell script cannot: the kernel hands it its path, not argv[0]). As
// calico-ipam it speaks 1.0.0 and hands out 10.0.0.9; as anything else
// it refuses.
func TestMain(m *testing.M) {
	if os.Getenv("CNI_COMMAND") == "" {
		os.Exit(m.Run())
	}
	if role := filepath.Base(os.Args[0]); role != "calico-ipam" {
		fmt.Printf(`{"cniVersion":"1.0.0","code":999,"msg":"role %s"}`, role)
		os.Exit(1)
	}
	switch os.Getenv("CNI_COMMAND") {
	case "VERSION":
		fmt.Print(`{"cniVersion":"1.0.0","supportedVersions":["0.3.1","1.0.0"]}`)
	case "ADD":
		fmt.Print(`{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.9/26"}]}`)
	}
	os.Exit(0)
}

// copyMultiCall copies the test binary into a new dir as "calico" (a
// copy: a link would be refused as safe-ipam delegating to itself).
func copyMultiCall(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "calico"), b, 0o755); err != nil {
		t.Fatalf("copying the test binary: %v", err)
	}
	return dir
}

// Installed as calico-ipam, safe-ipam runs Calico's "calico" binary as
// its delegate; that binary must see argv[0] calico-ipam, in VERSION and
// in every verb, or it acts as Calico's main plugin.
func TestMultiCallBinaryRunsUnderItsType(t *testing.T) {
	dir, cache := copyMultiCall(t), t.TempDir()
	ctx := context.Background()
	target := Target{Type: "calico-ipam", Binary: "calico"}
	for _, round := range []string{"asked", "cached"} {
		d, err := ResolveTarget(ctx, target, dir, cache)
		if err != nil {
			t.Fatalf("%s: %v", round, err)
		}
		if want := filepath.Join(dir, "calico"); d.Path != want || d.Argv0 != filepath.Join(dir, "calico-ipam") {
			t.Fatalf("%s: path %s argv0 %s; want %s run as calico-ipam", round, d.Path, d.Argv0, want)
		}
		if strings.Join(d.Versions, ",") != "0.3.1,1.0.0" {
			t.Fatalf("%s: versions %v, want the calico-ipam role's", round, d.Versions)
		}
	}
	d, _ := ResolveTarget(ctx, target, dir, cache)
	res, err := d.Add(ctx, []byte(`{"cniVersion":"1.0.0","name":"n","type":"calico-ipam"}`+"\n"), Env{ContainerID: "c", IfName: "eth0", Path: dir})
	if err != nil {
		t.Fatalf("ADD through the multi-call binary: %v", err)
	}
	r, err := current.NewResultFromResult(res)
	if err != nil || len(r.IPs) != 1 || r.IPs[0].Address.String() != "10.0.0.9/26" {
		t.Fatalf("ADD result %+v, %v", res, err)
	}
	if err := d.Run(ctx, "DEL", []byte(`{"cniVersion":"1.0.0","name":"n","type":"calico-ipam"}`+"\n"), Env{ContainerID: "c", IfName: "eth0", Path: dir}); err != nil {
		t.Fatalf("DEL through the multi-call binary: %v", err)
	}
}

// The version cache keeps one answer per role of a multi-call binary.
func TestVersionCacheKeepsRolesApart(t *testing.T) {
	dir, cache := copyMultiCall(t), t.TempDir()
	ctx := context.Background()
	if _, err := ResolveTarget(ctx, Target{Type: "calico-ipam", Binary: "calico"}, dir, cache); err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveTarget(ctx, Target{Type: "calico"}, dir, cache); err == nil {
		t.Fatal("the calico role was answered from the calico-ipam role's cached versions")
	}
}
