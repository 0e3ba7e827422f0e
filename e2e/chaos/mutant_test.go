package chaos

import (
	"os"
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
