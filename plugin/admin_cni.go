//go:build cnionly

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// AdminBinary is the full build, which safe-ipam built with -tags cnionly
// runs for the admin commands.
const AdminBinary = "safe-ipam-admin"

// runAdmin answers version and help itself and hands every other command
// to safe-ipam-admin in its own directory, replacing this process, so the
// command's output and exit code are the operator's.
func runAdmin(args []string) int {
	switch args[0] {
	case "version", "--version", "help", "-h", "--help":
		return runBuiltin(args[0])
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "safe-ipam: finding its own binary: %v\n", err)
		return 2
	}
	admin := filepath.Join(filepath.Dir(self), AdminBinary)
	err = syscall.Exec(admin, append([]string{admin}, args...), os.Environ())
	fmt.Fprintf(os.Stderr, "safe-ipam: %s is an admin command of %s, which must be installed beside %s: %v\n", args[0], AdminBinary, self, err)
	return 2
}
