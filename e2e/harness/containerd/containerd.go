package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Containerd is one containerd of a test, run inside a Holder's
// namespaces with its own root, state, socket and CNI directories.
type Containerd struct {
	Holder *Holder
	// Dir holds root/, state/, the config and the log.
	Dir string
	// BinDir and ConfDir are CNI's bin_dir and conf_dir.
	BinDir, ConfDir string
	// Env is added to containerd's environment, and so to every CNI
	// plugin it runs (CALICO_SIM_HANDLES, CALICO_IPAM_LOCK_FILE).
	Env []string
	// Sandbox is the sandbox image's tag (default SandboxImage).
	Sandbox string

	nsenter *exec.Cmd
	pid     int
	log     *os.File
}

// Socket is containerd's gRPC socket.
func (c *Containerd) Socket() string { return filepath.Join(c.Dir, "state", "containerd.sock") }

// Endpoint is the socket as the kubelet names it.
func (c *Containerd) Endpoint() string { return "unix://" + c.Socket() }

// LogPath is containerd's log file.
func (c *Containerd) LogPath() string { return filepath.Join(c.Dir, "containerd.log") }

// config is containerd 1.6's config (version 2). Facts from this kind of
// machine (containerd 1.6.20, runc 1.1.5): root lacks CAP_SYS_RESOURCE,
// so restrict_oom_score_adj is needed or runc fails with "can't get final
// child's PID from pipe: EOF"; cgroupfs, not systemd; overlayfs works;
// netns_mounts_under_state_dir keeps pod netns under the state dir.
func (c *Containerd) config() string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[5]q
    conf_dir = %[6]q
    max_conf_num = 1
`, filepath.Join(c.Dir, "root"), filepath.Join(c.Dir, "state"), c.Socket(), c.sandbox(), c.BinDir, c.ConfDir)
}

func (c *Containerd) sandbox() string {
	if c.Sandbox != "" {
		return c.Sandbox
	}
	return SandboxImage
}

// Start starts containerd and waits until its CRI API answers.
func (c *Containerd) Start(ctx context.Context) error {
	cfg := filepath.Join(c.Dir, "config.toml")
	if err := os.MkdirAll(filepath.Join(c.Dir, "state"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(cfg, []byte(c.config()), 0o644); err != nil {
		return fmt.Errorf("writing containerd config: %w", err)
	}
	log, err := os.OpenFile(c.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// Not CommandContext: containerd outlives the call that starts it.
	cmd := c.Holder.Command(context.Background(), "containerd", "--config", cfg)
	cmd.Env = append(ProcessEnv(), c.Env...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting containerd: %w", err)
	}
	c.nsenter, c.log = cmd, log
	if c.pid, err = ChildOf(ctx, cmd.Process.Pid); err != nil {
		c.Stop()
		return err
	}
	if err := c.waitReady(ctx); err != nil {
		c.Stop()
		return err
	}
	return nil
}

// ProcessEnv is the test's environment without CNI variables, with the
// directories of runc and the shim on PATH.
func ProcessEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CNI_") || strings.HasPrefix(kv, "PATH=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "PATH="+os.Getenv("PATH")+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
}

// ChildOf is the PID of nsenter's child: nsenter forks to enter the PID
// namespace, and the program it runs is that child.
func ChildOf(ctx context.Context, parent int) (int, error) {
	path := fmt.Sprintf("/proc/%d/task/%d/children", parent, parent)
	for {
		data, err := os.ReadFile(path)
		if err == nil {
			if f := strings.Fields(string(data)); len(f) > 0 {
				return strconv.Atoi(f[0])
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the PID of nsenter %d's child: %w (%v)", parent, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitReady polls the CRI Version call until containerd answers.
func (c *Containerd) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(c.Endpoint(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	for {
		_, err := rt.Version(ctx, &runtimeapi.VersionRequest{}, grpc.WaitForReady(true))
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("containerd did not answer on %s: %w (log %s)", c.Socket(), err, c.LogPath())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops containerd by PID (TERM, then KILL) and waits for it. Its
// shims and pods keep running, as on a real node.
func (c *Containerd) Stop() {
	if c.nsenter == nil {
		return
	}
	done := make(chan error, 1)
	go func() { done <- c.nsenter.Wait() }()
	_ = c.Thaw() // a frozen containerd cannot exit
	_ = syscall.Kill(c.pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(c.pid, syscall.SIGKILL)
		<-done
	}
	c.log.Close()
	c.nsenter, c.pid = nil, 0
}

// Restart stops containerd and starts it again in the same namespaces:
// started elsewhere, it would unlink the pod netns files it finds.
func (c *Containerd) Restart(ctx context.Context) error {
	c.Stop()
	return c.Start(ctx)
}

// Freeze stops containerd with SIGSTOP: its socket accepts connections
// but nothing answers, as with a hung runtime. Thaw resumes it. It
// returns once every thread has stopped: kill only sends the signal, and
// a thread still running under load answered a read that was meant to
// find the runtime hung (CI saw it).
func (c *Containerd) Freeze() error {
	if err := c.signal(syscall.SIGSTOP); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if stopped, err := allStopped(c.pid); err != nil || stopped {
			return err
		}
	}
	return fmt.Errorf("containerd (pid %d) did not stop within 10 s of SIGSTOP", c.pid)
}

// allStopped says whether every thread of pid is stopped (state T in its
// /proc stat).
func allStopped(pid int) (bool, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false, fmt.Errorf("threads of pid %d: %v", pid, err)
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread ended
		}
		if err != nil {
			return false, err
		}
		// The state follows the command name's closing parenthesis.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false, nil
		}
	}
	return true, nil
}

// Thaw resumes a frozen containerd. nsenter stops itself when its child
// stops (job control), so it is resumed too, or it never reaps containerd.
func (c *Containerd) Thaw() error {
	if c.nsenter != nil {
		_ = c.nsenter.Process.Signal(syscall.SIGCONT)
	}
	return c.signal(syscall.SIGCONT)
}

func (c *Containerd) signal(sig syscall.Signal) error {
	if c.pid == 0 {
		return errors.New("containerd is not running")
	}
	return syscall.Kill(c.pid, sig)
}

// CheckHost says why this machine cannot run containerd for suite here:
// root, and the programs scripts/install-deps.sh installs, with extra.
func CheckHost(suite string, extra ...string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("the %s suite must run as root: containerd, namespaces and veths", suite)
	}
	for _, prog := range append([]string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter", "ip"}, extra...) {
		if _, err := exec.LookPath(prog); err != nil {
			return fmt.Errorf("%s is not installed (run scripts/install-deps.sh): %w", prog, err)
		}
	}
	return nil
}
