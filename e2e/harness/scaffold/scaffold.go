// Package scaffold is the one TestMain of the e2e suites (e2e, runtime,
// cluster, chaos, scale): check the host, prepare it, build what the
// tests run into a directory of the run's own, run the tests, and undo
// it all, in that order, whatever the tests did.
package scaffold

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/gobuild"
	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
)

// Suite is one suite's run.
type Suite struct {
	// Name marks the build directory and the messages.
	Name string
	// Check says why this host cannot run the suite (nil: it can). On
	// such a host nothing is prepared or built, and every test that asks
	// Require skips, or fails under CI=true.
	Check func(ctx context.Context) error
	// Prepare readies a suitable host before the build; undo runs after
	// the tests. An error fails the run before any test.
	Prepare func(ctx context.Context) (undo func(), err error)
	// Build fills dir with what the tests run; an error fails the run
	// before any test (a suite that would rather fail each test keeps the
	// error and returns nil).
	Build func(ctx context.Context, dir string) error
	// Timeout bounds Check, Prepare and Build (0: 5 minutes).
	Timeout time.Duration

	unsuitable error
}

// Main is the suite's TestMain: it runs the suite and exits with the
// tests' code.
func (s *Suite) Main(m *testing.M) { os.Exit(s.run(m)) }

func (s *Suite) run(m *testing.M) int {
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if s.Check != nil {
		if s.unsuitable = s.Check(ctx); s.unsuitable != nil {
			return m.Run()
		}
	}
	if s.Prepare != nil {
		undo, err := s.Prepare(ctx)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", s.Name, err)
			return 1
		}
		defer undo()
	}
	return gobuild.Tests(m, s.Name, func(dir string) error {
		if s.Build == nil {
			return nil
		}
		return s.Build(ctx, dir)
	})
}

// Require skips t on a host the suite cannot run on, or fails it under
// CI=true (testbed.RequireHost).
func (s *Suite) Require(t testing.TB) {
	t.Helper()
	testbed.RequireHost(t, s.unsuitable)
}
