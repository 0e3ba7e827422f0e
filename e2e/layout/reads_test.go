package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// forbiddenReads open a file or directory with a blocking open and no
// bound (a FIFO at the path holds the caller past its deadline), or
// write through one (a FIFO with no reader holds a write-only open).
// Product code reads through package bounded instead, and gives client-go
// its config through package kubeconfig. Keyed by import path.
var forbiddenReads = map[string][]string{
	"os":                                 {"ReadFile", "Open", "ReadDir", "DirFS", "WriteFile", "Create", "OpenRoot", "OpenInRoot"},
	"io/ioutil":                          {"*"},
	"io/fs":                              {"ReadFile", "ReadDir", "Glob", "WalkDir"},
	"path/filepath":                      {"Walk", "WalkDir", "Glob"},
	"debug/buildinfo":                    {"ReadFile"},
	"debug/elf":                          {"Open"},
	"crypto/tls":                         {"LoadX509KeyPair"},
	"net/http":                           {"Dir", "ServeFile"},
	"text/template":                      {"ParseFiles", "ParseGlob"},
	"html/template":                      {"ParseFiles", "ParseGlob"},
	"k8s.io/client-go/tools/clientcmd":   {"BuildConfigFromFlags", "LoadFromFile", "BuildConfigFromKubeconfigGetter", "NewNonInteractiveDeferredLoadingClientConfig"},
	"k8s.io/client-go/rest":              {"InClusterConfig"},
	"google.golang.org/grpc/credentials": {"NewClientTLSFromFile", "NewServerTLSFromFile"},
	"golang.org/x/sys/unix":              {"Openat2"},
	"go.etcd.io/etcd/client/pkg/v3/transport": {"NewListener"},
}

// openCalls open with flags the caller gives, at this argument.
var openCalls = map[string]int{"os.OpenFile": 1, "syscall.Open": 1, "syscall.Openat": 2, "golang.org/x/sys/unix.Open": 1, "golang.org/x/sys/unix.Openat": 2}

// Every file a CNI call or an admin command reads goes through one
// opener (package bounded: non-blocking, regular files only, bounded):
// product code calls no other file read, not even as a function value or
// under another import name; it opens with flags only to write (without
// blocking, or a new file) or a directory.
func TestEveryReadGoesThroughTheOneOpener(t *testing.T) {
	root := moduleRoot(t)
	opens := 0
	for _, dir := range []string{"ipam", "plugin"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			if filepath.Base(filepath.Dir(path)) == "bounded" {
				return nil
			}
			opens += checkReads(t, root, path)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if opens < 5 {
		t.Errorf("found %d opens with flags in product code; it has more (is the check blind?)", opens)
	}
}

// checkReads reports the forbidden reads in one file and returns how
// many opens with flags it checked.
func checkReads(t *testing.T, root, path string) int {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, strings.TrimPrefix(path, root+"/"), src, 0)
	if err != nil {
		t.Fatal(err)
	}
	imports := importNames(f)
	for _, imp := range f.Imports {
		if imp.Name != nil && imp.Name.Name == "." {
			t.Errorf("%s dot-imports %s: its reads would go unseen", fset.Position(imp.Pos()), imp.Path.Value)
		}
	}
	checked := 0
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr: // a call, or a function value
			if fn := qualified(imports, n); forbidden(fn) {
				t.Errorf("%s uses %s: read through package bounded (non-blocking, regular files only, bounded)", fset.Position(n.Pos()), fn)
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			arg, ok := openCalls[qualified(imports, sel)]
			if !ok || arg >= len(n.Args) {
				return true
			}
			checked++
			if flags := identNames(n.Args[arg]); !safeOpen(flags) {
				t.Errorf("%s opens with %s: a read-only open belongs to package bounded, and a write must not block (O_NONBLOCK) or make a new file (O_EXCL)", fset.Position(n.Pos()), flags)
			}
		}
		return true
	})
	return checked
}

// importNames maps each name a file refers to an import by to its path.
func importNames(f *ast.File) map[string]string {
	names := map[string]string{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := filepath.Base(path)
		if strings.HasPrefix(name, "v") && strings.Count(path, "/") > 0 && len(name) <= 3 { // a major version suffix
			name = filepath.Base(filepath.Dir(path))
		}
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = path
	}
	return names
}

// qualified is sel as "importpath.Name", or "" when sel is not a
// package's name.
func qualified(imports map[string]string, sel *ast.SelectorExpr) string {
	id, ok := sel.X.(*ast.Ident)
	if !ok || id.Obj != nil { // a local variable, not a package
		return ""
	}
	path, ok := imports[id.Name]
	if !ok {
		return ""
	}
	return path + "." + sel.Sel.Name
}

func forbidden(fn string) bool {
	i := strings.LastIndex(fn, ".")
	if i < 0 {
		return false
	}
	for _, name := range forbiddenReads[fn[:i]] {
		if name == "*" || name == fn[i+1:] {
			return true
		}
	}
	return false
}

// identNames are the identifiers in an expression, space-separated.
func identNames(e ast.Expr) string {
	var b strings.Builder
	ast.Inspect(e, func(m ast.Node) bool {
		if id, ok := m.(*ast.Ident); ok {
			b.WriteString(id.Name + " ")
		}
		return true
	})
	return strings.TrimSpace(b.String())
}

// safeOpen says whether flags open a directory, a new file, or a file
// to write without blocking; a read-only open is bounded's.
func safeOpen(flags string) bool {
	has := func(name string) bool { return strings.Contains(" "+flags+" ", " "+name+" ") }
	switch {
	case has("O_DIRECTORY"), has("O_EXCL"), has("O_TMPFILE"):
		return true
	case has("O_WRONLY"), has("O_RDWR"):
		return has("O_NONBLOCK")
	}
	return false
}

// listeners are the calls that listen for connections.
var listeners = map[string][]string{
	"net":      {"Listen", "ListenTCP", "ListenUnix", "ListenPacket", "ListenUDP", "ListenIP", "ListenUnixgram", "FileListener"},
	"net/http": {"ListenAndServe", "ListenAndServeTLS"},
}

// docs/security.md, "Listeners, credentials and calls": only package
// metrics listens, and only the long-running commands (the watch, in
// install, gc --every and detect --every) start it; the CNI binary, install's init,
// uninstall and the commands run by hand listen on nothing.
func TestOnlyTheLongRunningCommandsListen(t *testing.T) {
	root := moduleRoot(t)
	starters := map[string]bool{}
	for _, dir := range []string{"ipam", "plugin"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			name := strings.TrimPrefix(path, root+"/")
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, name, src, 0)
			if err != nil {
				return err
			}
			imports := importNames(f)
			ast.Inspect(f, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				fn := qualified(imports, sel)
				i := strings.LastIndex(fn, ".")
				if i > 0 && slices.Contains(listeners[fn[:i]], fn[i+1:]) && filepath.Dir(name) != "ipam/admin/metrics" {
					t.Errorf("%s listens (%s): only package metrics serves, for the watch and gc", fset.Position(sel.Pos()), fn)
				}
				if fn == module+"/ipam/admin/metrics.ListenProbes" {
					starters[filepath.Dir(name)] = true
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if want := map[string]bool{"ipam/admin/gc": true, "ipam/admin/install": true, "ipam/admin/detect": true}; !maps.Equal(starters, want) {
		t.Errorf("metrics.ListenProbes is called from %v; want only gc, install (its watch) and detect (--every)", starters)
	}
}
