package builds

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/safe-ipam/safe-ipam/ipam/about"
)

// RunAdmin is what a CNI build, program, does when run without
// CNI_COMMAND: it answers version and help itself and hands every other command to
// AdminBinary in its own directory, replacing this process, so the
// command's output and exit code are the operator's. It returns only on
// failure, with the exit code to end with.
func RunAdmin(args []string, program, version string) int {
	if about.Builtin(args[0]) {
		about.Answer(os.Stdout, args[0], program, version)
		return 0
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
