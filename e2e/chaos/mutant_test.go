package chaos

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMutants builds deliberately broken safe-ipams and plays the
// histories meant to catch each: every mutant must break an invariant.
// Reproduce one by hand with
//
//	go test ./e2e/chaos -run 'TestMutants/forget-before-release' -v
func TestMutants(t *testing.T) {
	binaries(t) // the simulator build must work before mutants are worth building
	root, err := ModuleRoot(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, mu := range Mutants() {
		t.Run(mu.Name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "safe-ipam-mutant-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			bin, err := mu.Build(testContext(t), root, dir)
			if err != nil {
				t.Fatal(err)
			}
			reports := play(t, bin, mu.Catchers())
			sum := Summarize(reports)
			if caught, how := mu.Caught(reports); !caught {
				t.Fatalf("mutant %s survived (%s): %s", mu.Name, mu.Breaks, how)
			}
			for _, r := range reports {
				if len(r.Violations) > 0 {
					t.Logf("caught by %s: step %d: %s", r.Name, r.Violations[0].Step, r.Violations[0].Violation)
				}
			}
			t.Logf("%s: %s", mu.Breaks, sum)
		})
	}
}

// Every mutant finds its mark, once, with its Old right below it, and
// every mark in product code is a mutant's: a move or an edit that loses
// one fails here, in make test, before make chaos builds anything.
func TestEveryMutantFindsItsMark(t *testing.T) {
	root, err := ModuleRoot(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mu := range Mutants() {
		names[mu.Name] = true
		if _, _, _, err := mu.Target(root); err != nil {
			t.Error(err)
		}
	}
	marks := regexp.MustCompile(`// chaos:([a-z0-9-]+) `)
	for _, part := range []string{"ipam", "plugin"} {
		err := filepath.WalkDir(filepath.Join(root, part), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range marks.FindAllStringSubmatch(string(b), -1) {
				if !names[m[1]] {
					t.Errorf("%s marks %s for a mutant that does not exist", p, m[1])
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
