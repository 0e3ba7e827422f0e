package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/safe-ipam/safe-ipam/ipam/about"
)

// runAdmin answers version and help itself and hands every other command
// to safe-ipam-admin in its own directory, replacing this process, so the
// command's output and exit code are the operator's.
func runAdmin(args []string) int {
	if about.Builtin(args[0]) {
		about.Answer(os.Stdout, args[0], Version)
		return 0
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "safe-ipam: finding its own binary: %v\n", err)
		return 2
	}
	admin := filepath.Join(filepath.Dir(self), about.AdminBinary)
	err = syscall.Exec(admin, append([]string{admin}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "safe-ipam: %s is an admin command of %s, which must be installed beside %s: %v\n", args[0], about.AdminBinary, self, err)
	return 2
}
