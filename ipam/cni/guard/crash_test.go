package guard_test

import (
	"context"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// A process killed at any step of ADD, DEL or GC leaves a state from which
// the runtime's next DEL or GC releases everything and leaves no record.
func TestCrashAtEveryStep(t *testing.T) {
	type followUp string
	const (
		del       followUp = "DEL"
		gc        followUp = "GC"
		addAndDel followUp = "ADD then DEL"
	)
	tests := []struct {
		step    guard.Step
		setup   func(r *rig) // brings the attachment to where the step is reached
		verb    string
		failEnv string // makes the delegate fail so failure paths are reached
	}{
		{step: guard.AddStart, verb: "ADD"},
		{step: guard.AddReserved, verb: "ADD"},
		{step: guard.AddDelegated, verb: "ADD"},
		{step: guard.AddCommitted, verb: "ADD"},
		{step: guard.AddFailedReleased, verb: "ADD", failEnv: "ADD"},
		{step: guard.AddRecovered, verb: "ADD", setup: func(r *rig) { r.crashAt = guard.AddDelegated; r.run("ADD", env("c1"), r.conf()) }},
		{step: guard.DelStart, verb: "DEL", setup: func(r *rig) { r.add("c1") }},
		{step: guard.DelMarked, verb: "DEL", setup: func(r *rig) { r.add("c1") }},
		{step: guard.DelReleased, verb: "DEL", setup: func(r *rig) { r.add("c1") }},
		{step: guard.DelForgotten, verb: "DEL", setup: func(r *rig) { r.add("c1") }},
		{step: guard.GCReleased, verb: "GC", setup: func(r *rig) { r.add("c1") }},
		{step: guard.GCForgotten, verb: "GC", setup: func(r *rig) { r.add("c1") }},
	}
	for _, tt := range tests {
		for _, next := range []followUp{del, gc, addAndDel} {
			t.Run(string(tt.step)+"/"+string(next), func(t *testing.T) {
				forEachStore(t, func(t *testing.T, r *rig) {
					r.cniVersion = "1.1.0"
					r.extraIPAM = map[string]any{"gcGracePeriod": "0s"}
					if tt.setup != nil {
						tt.setup(r)
					}
					t.Setenv(fakeFailEnv, tt.failEnv)
					r.crashAt = tt.step
					stdin := r.conf()
					if tt.verb == "GC" {
						stdin = gcConf(t, r.conf())
					}
					if _, err := r.run(tt.verb, env("c1"), stdin); err != errCrashed {
						t.Fatalf("%s did not reach %s: %v", tt.verb, tt.step, err)
					}
					r.crashAt = ""
					t.Setenv(fakeFailEnv, "")
					switch next {
					case del:
						r.del("c1")
					case gc:
						if _, err := r.run("GC", delegate.Env{Path: binDir}, gcConf(t, r.conf())); err != nil {
							t.Fatalf("GC: %v", err)
						}
					case addAndDel:
						r.add("c1")
						if held := r.held(); len(held["net1.c1"]) != 1 {
							t.Fatalf("ADD after crash: delegate holds %v; want exactly one address", held)
						}
						r.del("c1")
					}
					if held, recs := r.held(), r.records(); len(held) != 0 || len(recs) != 0 {
						t.Fatalf("after crash at %s and %s: delegate holds %v, records %v", tt.step, next, held, recs)
					}
				})
			})
		}
	}
}

// takeoverProbe notes how many delegate DELs had run each time a record
// of the store was replaced.
type takeoverProbe struct {
	store.Store
	dels func() int
	at   []int
}

func (p *takeoverProbe) Swap(ctx context.Context, att record.Attachment, prev, next *record.Record) (*record.Record, error) {
	if prev != nil {
		p.at = append(p.at, p.dels())
	}
	return p.Store.Swap(ctx, att, prev, next)
}

// The ADD retried over the record of one killed after its delegate ADD
// takes the record over (marked releasing, under its own process) before
// the delegate frees its addresses: an ADD racing it finds the record at
// work, and a store whose records claim their addresses cluster-wide
// releases the killed call's claims with that write, so an address Calico
// frees is never left fenced by them (another pod given it would be
// refused), and a racing ADD can never release a claim of the one that
// took the record over.
func TestRetriedAddTakesTheRecordOverBeforeReleasing(t *testing.T) {
	r := newRig(t, "file")
	r.crashAt = guard.AddDelegated
	if _, err := r.run("ADD", env("c1"), r.conf()); err == nil {
		t.Fatal("the first ADD was not killed")
	}
	r.crashAt = ""
	before := len(r.calls("DEL"))
	p := &takeoverProbe{Store: r.store(), dels: func() int { return len(r.calls("DEL")) }}
	if _, err := r.guardOver(p, r.conf()).Add(context.Background(), env("c1")); err != nil {
		t.Fatal(err)
	}
	if len(r.calls("DEL")) == before {
		t.Fatal("the retried ADD released nothing of the killed one in the delegate")
	}
	if len(p.at) == 0 || p.at[0] != before {
		t.Fatalf("the killed ADD's record was first replaced after %v delegate DELs; want before any, after %d", p.at, before)
	}
}
