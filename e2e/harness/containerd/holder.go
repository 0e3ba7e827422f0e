package containerd

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Holder keeps a private mount, network and PID namespace alive: it is
// PID 1 there, so killing it ends everything started inside.
type Holder struct {
	cmd *exec.Cmd
	// Pid is the holder's PID on the host.
	Pid int
}

// StartHolder starts program (the pause binary: it reaps orphans, as PID 1
// must) in new namespaces. Mounts made inside stay inside; /proc is
// remounted for the new PID namespace, and loopback is brought up for the
// etcd proxy.
func StartHolder(ctx context.Context, program string) (*Holder, error) {
	cmd := exec.Command(program)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID,
		// A killed test run must not leave containerd behind.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the namespace holder %s: %w", program, err)
	}
	h := &Holder{cmd: cmd, Pid: cmd.Process.Pid}
	setup := [][]string{
		{"mount", "--make-rprivate", "/"},
		{"mount", "-t", "proc", "proc", "/proc"},
		{"ip", "link", "set", "lo", "up"},
	}
	for _, args := range setup {
		if err := h.Run(ctx, args...); err != nil {
			h.Stop()
			return nil, err
		}
	}
	return h, nil
}

// Command is args run inside the holder's namespaces.
func (h *Holder) Command(ctx context.Context, args ...string) *exec.Cmd {
	ns := []string{"-t", strconv.Itoa(h.Pid), "-m", "-n", "-p", "--"}
	return exec.CommandContext(ctx, "nsenter", append(ns, args...)...)
}

// Run runs args inside and waits.
func (h *Holder) Run(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := h.Command(ctx, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("in the holder's namespaces, %v: %w: %s", args, err, out.String())
	}
	return nil
}

// NetNSPath is the holder's network namespace.
func (h *Holder) NetNSPath() string { return fmt.Sprintf("/proc/%d/ns/net", h.Pid) }

// Stop kills the holder by PID; the kernel then kills every process of
// its PID namespace.
func (h *Holder) Stop() {
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
}
