package install

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// ErrLocked means another install, uninstall or watch is changing the
// node right now.
var ErrLocked = errors.New("another safe-ipam install is changing this node")

// lock takes the node's lock: an flock on the conf dir itself, so that
// no lock file is left in a directory uninstall must restore byte for
// byte. It does not wait: two installs at once are an operator's mistake
// to report, and the watch loop retries on its own.
func (n Node) lock() (unlock func(), err error) {
	d, err := os.Open(n.ConfDir)
	if err != nil {
		return nil, fmt.Errorf("--cni-conf-dir %s: %w", n.ConfDir, err)
	}
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		d.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (lock on %s held)", ErrLocked, n.ConfDir)
		}
		return nil, fmt.Errorf("locking %s: %w", n.ConfDir, err)
	}
	return func() { d.Close() }, nil
}

// Result is what one install or uninstall did.
type Result struct {
	Mode  string
	Plan  *Plan
	Notes []string
	// Applied is false for a dry run.
	Applied bool
}

// Install puts safe-ipam on the node in mode m, all or nothing, under the
// node's lock. With dryRun it only plans.
func Install(n Node, m Mode, self string, dryRun bool) (*Result, error) {
	return locked(n, dryRun, func() (*Plan, []string, error) {
		p, err := m.Install(n, self)
		return p, nil, err
	}, m.Name())
}

// Uninstall takes safe-ipam off the node in mode m.
func Uninstall(n Node, m Mode, dryRun bool) (*Result, error) {
	return locked(n, dryRun, func() (*Plan, []string, error) { return m.Uninstall(n) }, m.Name())
}

func locked(n Node, dryRun bool, plan func() (*Plan, []string, error), mode string) (*Result, error) {
	unlock, err := n.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if !dryRun {
		if err := n.removeStale(); err != nil {
			return nil, fmt.Errorf("removing what a killed install staged: %w", err)
		}
	}
	p, notes, err := plan()
	if err != nil {
		return nil, err
	}
	r := &Result{Mode: mode, Plan: p, Notes: notes}
	if dryRun || p.Empty() {
		return r, nil
	}
	if err := p.Apply(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	r.Applied = true
	return r, nil
}
