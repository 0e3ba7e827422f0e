package testbed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// ErrHostUnsuitable wraps every reason CheckHost gives.
var ErrHostUnsuitable = errors.New("cannot use real network namespaces here")

// CheckHost says why this machine cannot create network namespaces and
// veths: the testbed needs root and a working `ip netns`.
func CheckHost(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: it must run as root (network namespaces and veths need CAP_NET_ADMIN and CAP_SYS_ADMIN)", ErrHostUnsuitable)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%w: the ip command (iproute2) is not installed: %v", ErrHostUnsuitable, err)
	}
	probe := fmt.Sprintf("safeipam-probe-%d", os.Getpid())
	if _, err := ipCmd(ctx, "netns", "add", probe); err != nil {
		return fmt.Errorf("%w: ip netns is unavailable: %v", ErrHostUnsuitable, err)
	}
	if err := removeNetns(ctx, probe); err != nil {
		return fmt.Errorf("%w: ip netns del failed: %v", ErrHostUnsuitable, err)
	}
	return nil
}

const ipForwardSysctl = "/proc/sys/net/ipv4/ip_forward"

// PreserveIPForward records net.ipv4.ip_forward, which ptp turns on for
// every ADD, and returns a function that puts the host's value back.
func PreserveIPForward() (restore func() error, err error) {
	was, err := os.ReadFile(ipForwardSysctl)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", ipForwardSysctl, err)
	}
	return func() error {
		if err := os.WriteFile(ipForwardSysctl, was, 0o644); err != nil {
			return fmt.Errorf("restoring %s: %w", ipForwardSysctl, err)
		}
		return nil
	}, nil
}

// RequireHost skips a test on a host that cannot run it (unsuitable says
// why; nil runs it), or fails it under CI=true, where a skip would hide
// that the proof never ran.
func RequireHost(t testing.TB, unsuitable error) {
	t.Helper()
	if unsuitable == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true: %v", unsuitable)
	}
	t.Skip(unsuitable)
}
