// Package layout checks the shape of the repository that a newcomer reads
// at a glance: the import graph runs one way (product code never imports
// the test harness), every package says its one job, plugin/ holds one
// main per binary, and guard imports no Calico transport.
package layout

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/safe-ipam/safe-ipam"

// pkg is what go list says of one package.
type pkg struct {
	path, name, doc string
	imports         []string
	hasCode         bool // non-test Go files; a test-only package has no doc to give
}

func listPackages(t *testing.T, tags ...string) []pkg {
	t.Helper()
	args := []string{"list"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	args = append(args, "-f", "{{.ImportPath}}\t{{.Name}}\t{{len .GoFiles}}\t{{join .Imports \" \"}}\t{{.Doc}}", module+"/...")
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "\t", 5)
		if len(f) != 5 {
			t.Fatalf("go list line %q", sc.Text())
		}
		pkgs = append(pkgs, pkg{path: f[0], name: f[1], hasCode: f[2] != "0", imports: strings.Fields(f[3]), doc: f[4]})
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; the module has more", len(pkgs))
	}
	return pkgs
}

func rel(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, module), "/") }

// product says whether a package is product code: everything under
// plugin/ and ipam/ (their test files aside).
func product(p string) bool {
	r := rel(p)
	return strings.HasPrefix(r, "plugin/") || strings.HasPrefix(r, "ipam/")
}

// No non-test package under plugin/ or ipam/, in any build variant,
// imports anything under e2e/: the harness sits on top of the product,
// never under it.
func TestProductNeverImportsTheHarness(t *testing.T) {
	for _, tags := range [][]string{nil, {"crashpoints"}} {
		for _, p := range listPackages(t, tags...) {
			if !product(p.path) {
				continue
			}
			for _, imp := range p.imports {
				if strings.HasPrefix(imp, module+"/e2e/") || imp == module+"/e2e" {
					t.Errorf("%s (tags %v) imports %s: product code must not depend on the test harness", rel(p.path), tags, rel(imp))
				}
			}
		}
	}
}

// guard runs the CNI verbs and nothing else: what it reads of Calico's
// data goes through the interface it declares (guard.CalicoData), which
// lookup implements. No Calico transport, etcd or Kubernetes
// client is its own import.
func TestGuardImportsNoCalicoTransport(t *testing.T) {
	banned := []string{"go.etcd.io/", module + "/ipam/etcdconn", module + "/ipam/kubeapi", "k8s.io/"}
	found := false
	for _, p := range listPackages(t) {
		if p.path != module+"/ipam/cni/guard" {
			continue
		}
		found = true
		for _, imp := range p.imports {
			for _, b := range banned {
				if strings.HasPrefix(imp, b) || strings.Contains(imp, "."+b) { // sigs.k8s.io/ too
					t.Errorf("ipam/cni/guard imports %s: it reads Calico's data through guard.CalicoData only", imp)
				}
			}
		}
	}
	if !found {
		t.Fatal("go list did not list ipam/cni/guard")
	}
}

// The record store is one interface with its implementations side by
// side: nothing outside ipam/store type-asserts a concrete store, and the
// etcd store's key layout is spelled in one file, which every test builds
// keys through.
func TestStoreLayoutIsSpelledOnce(t *testing.T) {
	root := moduleRoot(t)
	keys := filepath.Join(root, "ipam", "store", "etcdstore", "keys.go")
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || path == keys {
			if d != nil && d.IsDir() && d.Name() == ".git" {
				return filepath.SkipDir
			}
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		inStore := strings.HasPrefix(path, filepath.Join(root, "ipam", "store")+string(filepath.Separator))
		// Spelled in pieces, so that this file does not name them itself.
		for _, s := range []string{".(*" + "etcdstore.", ".(*" + "filestore."} {
			if !inStore && bytes.Contains(b, []byte(s)) {
				t.Errorf("%s type-asserts a concrete store (%s...): use store.Store or store.Cluster", path, s)
			}
		}
		for _, s := range []string{`"/` + `attachments/`, `"/` + `addresses/`, `"/` + `quarantine/`, `/` + `attachments/"`, `/` + `addresses/"`} {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s spells an etcd store key (%s): build it through etcdstore's key functions", path, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Every package's doc comment says its one job.
func TestEveryPackageSaysItsJob(t *testing.T) {
	for _, p := range listPackages(t) {
		if p.hasCode && strings.TrimSpace(p.doc) == "" {
			t.Errorf("%s has no package doc comment", rel(p.path))
		}
	}
}

// plugin/ holds one main package per binary and nothing else.
func TestPluginHoldsOneMainPerBinary(t *testing.T) {
	var mains []string
	for _, p := range listPackages(t) {
		if r := rel(p.path); strings.HasPrefix(r, "plugin") {
			if p.name != "main" {
				t.Errorf("%s is package %s; plugin/ holds only main packages", r, p.name)
			}
			mains = append(mains, r)
		}
	}
	if want := []string{"plugin/safe-ipam", "plugin/safe-ipam-admin", "plugin/safe-ipam-etcd"}; strings.Join(mains, " ") != strings.Join(want, " ") {
		t.Errorf("plugin/ has %v, want %v", mains, want)
	}
}

// No build tag decides what a product binary is; the crash points are a
// test-only tag, and go vet runs on that build too (make lint).
func TestNoBuildTagMakesAProduct(t *testing.T) {
	root := moduleRoot(t)
	for _, dir := range []string{"plugin", "ipam"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, line := range strings.Split(string(b), "\n") {
				if c, ok := strings.CutPrefix(line, "//go:build "); ok && strings.Trim(c, "!") != "crashpoints" {
					t.Errorf("%s: build constraint %q; only the test-only crashpoints tag is allowed", path, c)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	lint, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(lint), "vet -tags crashpoints") {
		t.Error("make lint does not vet the crashpoints build")
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}

// Tests stand on their own: a fresh clone with nothing beside it passes,
// so no Go file reaches for the reference files kept beside the
// repository.
func TestNothingReadsBesideTheRepository(t *testing.T) {
	root := moduleRoot(t)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			if d != nil && d.IsDir() && d.Name() == ".git" {
				return filepath.SkipDir
			}
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// Spelled in pieces, so that this file does not name them itself.
		for _, s := range []string{".." + "/shared", `"shared", ` + `"calico"`, "shared" + "/calico"} {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s names %s: tests must not read beside the repository", path, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The top level is the one the project was specified with, and nothing
// else: a newcomer finds the binaries, the logic, the tests, the
// scripts, the manifests and the docs where they expect them.
func TestTopLevelIsTheSpecifiedOne(t *testing.T) {
	root := moduleRoot(t)
	want := map[string]bool{"plugin": true, "ipam": true, "e2e": true, "scripts": true, "deploy": true, "docs": true,
		"go.mod": true, "go.sum": true, "Makefile": true, "LICENSE": true, "README.md": true, ".ci": true, ".gitignore": true}
	out, err := exec.Command("git", "-C", root, "ls-files").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	seen := map[string]bool{}
	for _, f := range strings.Fields(string(out)) {
		top, _, _ := strings.Cut(f, "/")
		if !want[top] && !seen[top] {
			t.Errorf("%s at the top level: the layout is plugin/, ipam/, e2e/, scripts/, deploy/, docs/ and the module's files", top)
		}
		seen[top] = true
	}
	for _, dir := range []string{"plugin", "ipam", "e2e", "scripts", "deploy", "docs"} {
		if !seen[dir] {
			t.Errorf("%s/ is missing", dir)
		}
	}
}

// Issue 41: whether a record, handle or allocation may be released or
// forgotten is decided in one place, ipam/rulebook. Every product file
// that releases or forgets (guard.Collect, guard.Forget, a repair's
// release or forget action, the records' Forget) asks it there: it names
// the rulebook, or acts only on the audit's Releasable, the rulebook's
// verdict. A new path that releases without asking fails here.
func TestReleasesAskTheRulebook(t *testing.T) {
	root := moduleRoot(t)
	// Spelled in pieces, so that this file does not match itself.
	calls := []string{".Collect" + "(ctx", "Guard.Forget" + "(ctx", "Records.Forget" + "(ctx", "Kind: " + "ReleaseHandle", "Kind: " + "ForgetRecord"}
	found := 0
	for _, dir := range []string{"ipam", "plugin"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, c := range calls {
				if !bytes.Contains(b, []byte(c)) {
					continue
				}
				found++
				if !bytes.Contains(b, []byte("rulebook.")) && !bytes.Contains(b, []byte(".Releasable")) {
					t.Errorf("%s releases or forgets (%s) without asking the rulebook: judge through rulebook (a Witness, Handle, UninstallQuarantines) or act on its verdict", rel(path), c)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if found < 6 {
		t.Errorf("found %d release or forget calls; the product has more (did a name change?)", found)
	}
}

// Issue 43: no arrow runs back up. The record stores, their opener
// included, import only the leaves they stand on (the config, the
// record, the etcd and Kubernetes API connections, the bounded reader
// and the cache dir's small files); what sets the
// full builds up (package backends) sits above both invocation and the opener.
func TestTheStoresImportOnlyTheLeaves(t *testing.T) {
	leaves := []string{"config", "record", "store", "etcdconn", "etcdrange", "etcdtls", "kubeapi", "bounded", "cachedir", "jsonscan", "logging"}
	seen := 0
	for _, p := range listPackages(t) {
		if !strings.HasPrefix(rel(p.path), "ipam/store") {
			continue
		}
		seen++
		for _, imp := range p.imports {
			r, ok := strings.CutPrefix(imp, module+"/ipam/")
			if !ok {
				continue
			}
			if !slices.Contains(leaves, r) && !strings.HasPrefix(r, "store/") {
				t.Errorf("%s imports %s: a store stands on the leaves only, and what reaches Calico or runs the verbs sits above it", rel(p.path), rel(imp))
			}
		}
	}
	if seen < 4 {
		t.Fatalf("go list listed %d packages under ipam/store", seen)
	}
}

// Issue 43: the layers. Calico's data model (ipam/calico/...) sits below
// the verbs and imports no guard (the verbs' reader of Calico, package
// lookup, sits beside them); the CNI builds link no admin command, no
// liveness source and no metrics.
func TestTheLayersRunOneWay(t *testing.T) {
	deps := func(pkgs ...string) []string {
		out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).Output()
		if err != nil {
			t.Fatalf("go list -deps %v: %v", pkgs, err)
		}
		return strings.Fields(string(out))
	}
	calico := deps(module + "/ipam/calico/...")
	if len(calico) < 10 {
		t.Fatalf("go list found %d dependencies of ipam/calico", len(calico))
	}
	for _, d := range calico {
		if d == module+"/ipam/cni/guard" || d == module+"/ipam/cni/invocation" {
			t.Errorf("Calico's data model (ipam/calico/...) depends on %s, the verbs", rel(d))
		}
	}
	// The admin part is everything under ipam/admin (the commands, their
	// flags, liveness sources, metrics); kubeconfig is the admin
	// commands' way to the API server.
	admin := func(r string) bool { return r == "admin" || strings.HasPrefix(r, "admin/") || r == "kubeconfig" }
	cni := deps(module+"/plugin/"+"safe-ipam", module+"/plugin/safe-ipam-etcd")
	if !slices.Contains(cni, module+"/ipam/cni/guard") {
		t.Fatal("the CNI builds' dependencies do not include ipam/cni/guard: is the check blind?")
	}
	for _, d := range cni {
		if r, ok := strings.CutPrefix(d, module+"/ipam/"); ok && admin(r) {
			t.Errorf("a CNI build depends on %s, an admin part", rel(d))
		}
	}
}

// docs/layout.md's recipes ("Where to change what") name files that
// exist: a move that leaves a recipe pointing nowhere fails here.
func TestTheRecipesNameFilesThatExist(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "layout.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, recipes, ok := strings.Cut(string(doc), "## Where to change what")
	if !ok {
		t.Fatal("docs/layout.md has no \"Where to change what\" section")
	}
	named := regexp.MustCompile("`((?:ipam|plugin|e2e)/[A-Za-z0-9_./-]+\\.go)`").FindAllStringSubmatch(recipes, -1)
	if len(named) < 15 {
		t.Fatalf("the recipes name %d files; they name more", len(named))
	}
	for _, m := range named {
		if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
			t.Errorf("docs/layout.md's recipes name %s: %v", m[1], err)
		}
	}
}
