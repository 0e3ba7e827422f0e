package invocation

import (
	"errors"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/failnote"
)

// Issue 44, item 1: which calls leave the watch a failure note, and
// which remove it. Only an ADD's success removes it: the runtime's DEL
// after a failed ADD succeeds, and proves no pod can start.
func TestNoteOutcome(t *testing.T) {
	cfg := &config.Config{CacheDir: t.TempDir(), Network: "net1"}
	unavailable := types.NewError(types.ErrTryAgainLater, "recording net1/c1/eth0: etcd not reachable", "")
	steps := []struct {
		verb string
		err  error
		want bool // a note after the call
	}{
		{"CHECK", unavailable, false},
		{"GC", unavailable, false},
		{"ADD", types.NewError(types.ErrInvalidNetworkConfig, "ipam.store", ""), false},
		{"ADD", unavailable, true},
		{"DEL", nil, true},
		{"STATUS", nil, true},
		{"ADD", nil, false},
		{"DEL", errors.New("calico-ipam: exec failed"), true},
		{"ADD", nil, false},
	}
	for i, s := range steps {
		noteOutcome(s.verb, cfg, s.err)
		n, err := failnote.Read(cfg.CacheDir, cfg.Network)
		if err != nil || (n != nil) != s.want {
			t.Fatalf("step %d, %s (%v): note %+v, %v; want a note %v", i, s.verb, s.err, n, err, s.want)
		}
		if n != nil && n.Network != "net1" {
			t.Errorf("step %d: note %+v; want network net1", i, n)
		}
	}
}
