package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// forbiddenReads are calls that open a file or directory to read it with
// a blocking open and no bound: a FIFO at the path holds the caller past
// its deadline. Product code reads through package nodefile (and gives
// client-go its config through package kubeconfig) instead.
var forbiddenReads = map[string]bool{
	"os.ReadFile": true, "os.Open": true, "os.ReadDir": true, "os.DirFS": true,
	"ioutil.ReadFile": true, "ioutil.ReadDir": true,
	"filepath.Walk": true, "filepath.WalkDir": true, "fs.ReadFile": true, "fs.ReadDir": true,
	"buildinfo.ReadFile": true, "elf.Open": true,
	"clientcmd.BuildConfigFromFlags": true, "clientcmd.LoadFromFile": true, "rest.InClusterConfig": true,
	"tls.LoadX509KeyPair": true,
}

// openCalls open with flags the caller gives: allowed only when the
// flags cannot block (O_NONBLOCK, O_DIRECTORY) or the file is new
// (O_EXCL, O_TMPFILE).
var openCalls = map[string]int{"os.OpenFile": 1, "syscall.Open": 1, "unix.Open": 1, "unix.Openat": 2, "unix.Openat2": -1}

// nonBlocking are the flag names that make an open safe from a FIFO.
var nonBlocking = []string{"O_NONBLOCK", "O_DIRECTORY", "O_EXCL", "O_TMPFILE", "RESOLVE_"}

// Every file a CNI call or an admin command reads goes through one
// opener (package nodefile: non-blocking, regular files only, bounded):
// product code calls no other file read, and opens with flags only what
// cannot block.
func TestEveryReadGoesThroughTheOneOpener(t *testing.T) {
	root := moduleRoot(t)
	calls := 0
	for _, dir := range []string{"ipam", "plugin"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			if filepath.Base(filepath.Dir(path)) == "nodefile" {
				return nil
			}
			calls += checkReads(t, root, path)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if calls < 5 {
		t.Errorf("found %d opens with flags in product code; it has more (is the check blind?)", calls)
	}
}

// checkReads reports the forbidden reads in one file and returns how
// many flagged opens it checked.
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
	checked := 0
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		pkg, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		fn := pkg.Name + "." + sel.Sel.Name
		if forbiddenReads[fn] {
			t.Errorf("%s calls %s: read through package nodefile (non-blocking, regular files only, bounded)", fset.Position(call.Pos()), fn)
		}
		arg, ok := openCalls[fn]
		if !ok {
			return true
		}
		checked++
		if arg < 0 || arg >= len(call.Args) {
			return true // openat2 takes its flags in a struct: RESOLVE_ is looked for in the file
		}
		var flags strings.Builder
		ast.Inspect(call.Args[arg], func(m ast.Node) bool {
			if id, ok := m.(*ast.Ident); ok {
				flags.WriteString(id.Name + " ")
			}
			return true
		})
		if !containsAny(flags.String(), nonBlocking) {
			t.Errorf("%s opens with %s and none of %v: a FIFO there would block it; read through package nodefile", fset.Position(call.Pos()), strings.TrimSpace(flags.String()), nonBlocking)
		}
		return true
	})
	return checked
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
