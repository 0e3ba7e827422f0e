package delegate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// argv0Exec runs a plugin the way libcni's RawExec does, except that
// argv[0] is the plugin's name rather than the file's path: Calico's
// multi-call binary, run as the delegate of a safe-ipam installed as
// calico-ipam, must see "calico-ipam" there.
type argv0Exec struct {
	argv0 string
	version.PluginDecoder
}

func newExec(argv0 string) invoke.Exec { return &argv0Exec{argv0: argv0} }

// busyRetries bounds the retries while the binary is being replaced:
// calico-node re-copies its binaries on every start.
const busyRetries = 5

func (e *argv0Exec) ExecPlugin(ctx context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	for i := 0; ; i++ {
		out, err := e.run(ctx, path, stdin, environ)
		if err == nil || !errors.Is(err, syscall.ETXTBSY) || i == busyRetries {
			return out, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (e *argv0Exec) run(ctx context.Context, path string, stdin []byte, environ []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, path)
	if e.argv0 != "" {
		cmd.Args[0] = e.argv0
	}
	confine(cmd)
	cmd.Env = environ
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		_, _ = stderr.WriteTo(os.Stderr) // the plugin's own log lines, as libcni passes them on
		return stdout.Bytes(), nil
	}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return nil, err // never started: ETXTBSY, ENOENT, ...
	}
	return nil, pluginError(err, stdout.Bytes(), stderr.Bytes())
}

// pluginError is the CNI error a failed plugin printed, or one that says
// what it printed instead.
func pluginError(err error, stdout, stderr []byte) error {
	e := &types.Error{}
	switch {
	case len(stdout) > 0:
		if jerr := json.Unmarshal(stdout, e); jerr != nil {
			e.Msg = fmt.Sprintf("netplugin failed but error parsing its diagnostic message %q: %v", stdout, jerr)
		}
	case len(stderr) > 0:
		e.Msg = fmt.Sprintf("netplugin failed: %q: %v", stderr, err)
	default:
		e.Msg = fmt.Sprintf("netplugin failed with no error message: %v", err)
	}
	return e
}

func (e *argv0Exec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}

// confine puts the delegate in a process group of its own, killed whole
// when the verb's deadline passes, so no child it started (calico-ipam
// runs none, but a wrapper may) outlives the call; and asks the kernel to
// kill the delegate if safe-ipam itself dies first (a runtime that gives
// up kills only its plugin). A grandchild that keeps the output pipes
// open cannot hold Wait past waitDelay.
func confine(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = waitDelay
}

// waitDelay bounds the wait for the output pipes after the delegate was
// killed.
const waitDelay = 2 * time.Second
