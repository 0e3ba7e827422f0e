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

// Holder keeps a private mount, network and PID namespace alive (and a
// UTS namespace, when it has a host name of its own): it is PID 1 there,
// so killing it ends everything started inside.
type Holder struct {
	cmd *exec.Cmd
	// Pid is the holder's PID on the host.
	Pid int
	// uts: the holder has its own UTS namespace, which Command enters.
	uts bool
}

// StartHolder starts program (the pause binary: it reaps orphans, as PID 1
// must) in new namespaces. Mounts made inside stay inside; /proc is
// remounted for the new PID namespace, and loopback is brought up for the
// etcd proxy.
func StartHolder(ctx context.Context, program string) (*Holder, error) {
	return StartHostHolder(ctx, program, "")
}

// StartHostHolder is StartHolder with a UTS namespace of its own whose
// host name is hostname, as on a machine of its own: safe-ipam tells
// machines apart by host name. "" shares the host's, as StartHolder.
func StartHostHolder(ctx context.Context, program, hostname string) (*Holder, error) {
	flags := syscall.CLONE_NEWNS | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID
	if hostname != "" {
		flags |= syscall.CLONE_NEWUTS
	}
	cmd := exec.Command(program)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: uintptr(flags),
		// A killed test run must not leave containerd behind.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the namespace holder %s: %w", program, err)
	}
	h := &Holder{cmd: cmd, Pid: cmd.Process.Pid, uts: hostname != ""}
	setup := [][]string{
		{"mount", "--make-rprivate", "/"},
		{"mount", "-t", "proc", "proc", "/proc"},
		{"ip", "link", "set", "lo", "up"},
	}
	if h.uts {
		setup = append(setup, []string{"hostname", hostname})
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
	ns := []string{"-t", strconv.Itoa(h.Pid), "-m", "-n", "-p"}
	if h.uts {
		ns = append(ns, "-u")
	}
	return exec.CommandContext(ctx, "nsenter", append(append(ns, "--"), args...)...)
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
