package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// testName is a Go test named in a document: `TestSomething`.
var testName = regexp.MustCompile("`(Test[A-Z][A-Za-z0-9_]*)`")

// Issue 42, item 8: docs/security.md backs its claims with tests by name;
// every test it names exists, so a renamed or removed test cannot leave
// a claim standing on nothing.
func TestSecurityClaimsNameRealTests(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range testName.FindAllStringSubmatch(string(doc), -1) {
		named[m[1]] = false
	}
	if len(named) < 20 {
		t.Fatalf("docs/security.md names %d tests; its claims need more", len(named))
	}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() && d.Name() == ".git" {
			if err == nil {
				return filepath.SkipDir
			}
			return err
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for name := range named {
			if strings.Contains(string(src), "func "+name+"(t *testing.T)") {
				named[name] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, found := range named {
		if !found {
			t.Errorf("docs/security.md names %s, which no test file defines", name)
		}
	}
}
