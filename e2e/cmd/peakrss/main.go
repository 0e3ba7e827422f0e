// Command peakrss runs a command and writes its peak RSS in KiB to the
// file named by -o, like /usr/bin/time -f %M. It exists because a child
// started by a large process (the bench, with an embedded etcd) inherits
// that process's RSS high-water mark through vfork; started from this
// small process, the figure is the command's own.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	out := flag.String("o", "", "file to write the peak RSS (KiB) to")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: peakrss -o FILE command [args...]")
		os.Exit(2)
	}
	cmd := exec.Command(flag.Arg(0), flag.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		fmt.Fprintln(os.Stderr, "peakrss:", err)
		os.Exit(2)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		if werr := os.WriteFile(*out, []byte(fmt.Sprint(ru.Maxrss)), 0o644); werr != nil {
			fmt.Fprintln(os.Stderr, "peakrss:", werr)
			os.Exit(2)
		}
	}
	os.Exit(cmd.ProcessState.ExitCode())
}
