// Command pause is the sandbox image's only program, built by the runtime
// suite because no registry can be reached: it holds the pod's namespaces
// until it is told to stop, and reaps children, as Kubernetes' pause does.
// The suite also runs it as the holder of containerd's private namespaces,
// where it is PID 1 and must reap orphans.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			return
		}
		reap()
	}
}

// reap collects every exited child, so none stays a zombie.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
