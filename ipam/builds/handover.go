package builds

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"
)

// HandOver runs the call in the build called name beside this binary,
// replacing this process: the runtime's stdin, read already, is given to
// it again from memory, and the environment is the runtime's, so the
// other build sees the call the runtime made, prints its result and ends
// with its exit code. Nothing has been opened or changed here by then. It
// returns only when the other build cannot be run: code 50, naming it.
func HandOver(name string, stdin []byte, started time.Time) error {
	self, err := os.Executable()
	if err != nil {
		return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("finding its own binary to hand the call to %s: %v", name, err), "")
	}
	bin := filepath.Join(filepath.Dir(self), name)
	// A call handed over already, or a file under the etcd build's name
	// that is this very binary, is a lean build in the etcd build's place:
	// handing over again would run itself until the runtime kills it.
	if by := os.Getenv(HandedOverEnv); by != "" || sameFile(self, bin) {
		return types.NewError(types.ErrPluginNotAvailable,
			fmt.Sprintf("%s is not the etcd build (it hands calls over itself): install safe-ipam's %s there", bin, name), "")
	}
	if err := stdinFrom(stdin); err != nil {
		return types.NewError(types.ErrInternal, fmt.Sprintf("handing the call to %s: %v", bin, err), "")
	}
	// The other build must refuse a delegate that is this binary as it
	// refuses itself: each would run the other until the deadline.
	env := append(os.Environ(), HandedOverEnv+"="+self, startedEnv+"="+strconv.FormatInt(started.UnixNano(), 10))
	err = syscall.Exec(bin, []string{bin}, env)
	return types.NewError(types.ErrPluginNotAvailable,
		fmt.Sprintf("the record store is etcd, which this build reaches through %s, and it must be installed beside %s", name, self),
		err.Error())
}

// sameFile says whether a and b name one file.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}

// stdinFrom makes data the process's stdin: a memory file, rewound, on
// fd 0. It is not closed on exec; the file it was made as is.
func stdinFrom(data []byte) error {
	fd, err := unix.MemfdCreate("safe-ipam-stdin", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("memfd_create: %w", err)
	}
	defer unix.Close(fd)
	for rest := data; len(rest) > 0; {
		n, err := unix.Write(fd, rest)
		if err != nil {
			return fmt.Errorf("writing the config to memory: %w", err)
		}
		rest = rest[n:]
	}
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return fmt.Errorf("rewinding: %w", err)
	}
	return unix.Dup3(fd, 0, 0)
}

// HandedOverEnv names, in the build a call was handed over to, the CNI
// binary that handed it over: a delegate that is that binary is refused
// as one that is this binary is (package delegate).
const HandedOverEnv = "SAFE_IPAM_HANDED_OVER_BY"

// startedEnv carries, to the build a call is handed over to, when the
// call started: its ipam.verbTimeout runs from then, not from its exec.
const startedEnv = "SAFE_IPAM_CALL_STARTED"

// CallStarted is when this call started: now, or, in the build a call was
// handed over to, the start the hand-over carried (only an earlier one,
// and only after a hand-over: the runtime's environment sets no deadline).
func CallStarted(now time.Time) time.Time {
	if os.Getenv(HandedOverEnv) == "" {
		return now
	}
	ns, err := strconv.ParseInt(os.Getenv(startedEnv), 10, 64)
	if err != nil {
		return now
	}
	if t := time.Unix(0, ns); t.Before(now) {
		return t
	}
	return now
}
