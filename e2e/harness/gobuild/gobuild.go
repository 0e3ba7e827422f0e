// Package gobuild compiles the programs the tests and the harness run,
// with the go command of the module they are in: one way to build, whose
// errors carry the go command's own output.
package gobuild

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Build is one go build.
type Build struct {
	// Out is a file for one package, or a directory (ending in a path
	// separator) for several, each named after its directory.
	Out  string
	Pkgs []string
	// Flags go before -o, for example -tags crashpoints or -trimpath.
	Flags []string
	// Env is added to the environment, for example CGO_ENABLED=0.
	Env []string
	// Dir is where go runs, the module to build; "" is the current
	// directory.
	Dir string
}

// Run builds, and on failure returns the go command's output with the error.
func (b Build) Run(ctx context.Context) error {
	args := append(append([]string{"build"}, b.Flags...), "-o", b.Out)
	cmd := exec.CommandContext(ctx, "go", append(args, b.Pkgs...)...)
	cmd.Dir = b.Dir
	cmd.Env = append(os.Environ(), b.Env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		where := ""
		if b.Dir != "" {
			where = " in " + b.Dir
		}
		return fmt.Errorf("go %s %s%s: %w\n%s", strings.Join(args, " "), strings.Join(b.Pkgs, " "), where, err, out.String())
	}
	return nil
}

// Main is the TestMain of a package whose tests run programs it builds:
// it builds pkgs into a new directory, sets *dir to it, runs the tests,
// removes the directory and exits with the tests' code. A failed build
// fails the run before any test, under CI or not.
func Main(m *testing.M, dir *string, pkgs ...string) {
	os.Exit(Tests(m, "test", func(d string) error {
		*dir = d
		return Build{Out: d + string(os.PathSeparator), Pkgs: pkgs}.Run(context.Background())
	}))
}

// Tests runs a package's tests once build has filled a new directory
// with what they run, removes the directory, and returns the exit code;
// name marks the directory and the messages. A failed build fails the run
// (code 1) before any test.
func Tests(m *testing.M, name string, build func(dir string) error) int {
	dir, err := os.MkdirTemp("", "safe-ipam-"+name+"-bin-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := build(dir); err != nil {
		fmt.Fprintf(os.Stderr, "%s: building: %v\n", name, err)
		return 1
	}
	return m.Run()
}
