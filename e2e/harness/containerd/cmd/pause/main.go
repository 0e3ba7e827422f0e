// Command pause is the sandbox image's only program, built by the runtime
// suite because no registry can be reached: it holds the pod's namespaces
// until it is told to stop, and reaps children, as Kubernetes' pause does.
// The suite also runs it as the holder of containerd's private namespaces,
// where it is PID 1 and must reap orphans. With --ignore-term it stays on
// SIGTERM, as a container that ignores it does: the kubelet kills it after
// the grace period (the cluster suite's StatefulSet uses that to make a
// new pod's ADD come before the old one's DEL).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ignoreTerm := len(os.Args) > 1 && os.Args[1] == "--ignore-term"
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		switch {
		case sig == syscall.SIGCHLD:
			reap()
		case sig == syscall.SIGTERM && ignoreTerm:
		default:
			return
		}
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
