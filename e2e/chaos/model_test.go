package chaos

import (
	"net/netip"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
)

// TestOutageExpectAfterCrashedCommit: an ADD retried during an outage is
// answered from the committed record a crash after the commit left, which
// a file store serves without etcd. Any other failed ADD left no
// committed record, so its retry fails (11 with the etcd store). Seed
// 186559945 failed on this expectation.
func TestOutageExpectAfterCrashedCommit(t *testing.T) {
	tests := []struct {
		name    string
		crashes []guard.Step // the ADD attempts before the retry, each crashed here
		store   StoreKind
		want    Expect
	}{
		{"crash after commit, file store", []guard.Step{guard.AddCommitted}, FileStore, Succeeds},
		{"crash after commit, etcd store", []guard.Step{guard.AddCommitted}, EtcdStore, TryAgain},
		{"crash after commit then before the record is read", []guard.Step{guard.AddCommitted, guard.AddStart}, FileStore, Succeeds},
		{"crash after the delegate, before commit", []guard.Step{guard.AddDelegated}, FileStore, Fails},
		{"crash at start", []guard.Step{guard.AddStart}, FileStore, Fails},
		{"crash after a failed delegate ADD was released", []guard.Step{guard.AddFailedReleased}, FileStore, Fails},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewModel(Setup{Generation: Modern, Store: tt.store, Nodes: 1})
			a := m.Incarnate("web-0", node1, "sandbox-1")
			for _, step := range tt.crashes {
				m.Apply(Call{Verb: Add, Node: node1, Att: a, CrashAt: step}, Outcome{Crashed: true})
			}
			retry := Call{Verb: Add, Node: node1, Att: a, Outage: true}
			if got := outageExpect(tt.store, retry); got != tt.want {
				t.Errorf("retried ADD during an outage must give %s, model expects %s", tt.want, got)
			}
		})
	}
}

// TestOutageExpectForAQuarantinedDel: a fenced ADD leaves its allocation
// quarantined for the holder it names; the attachment's DEL releases
// nothing and calls no delegate until the holder is released (docs/design.md,
// "Fencing"), so with a file store it succeeds during an outage. Once the
// holder is released the quarantine goes with it, and the DEL is an
// ordinary one again. Seed 607448584 failed on this expectation.
func TestOutageExpectForAQuarantinedDel(t *testing.T) {
	tests := []struct {
		name           string
		store          StoreKind
		holderReleased bool
		notAFence      bool
		want           Expect
	}{
		{"quarantined, file store", FileStore, false, false, Succeeds},
		{"quarantined, etcd store", EtcdStore, false, false, TryAgain},
		{"holder released since, file store", FileStore, true, false, Fails},
		{"failed with 11 for another reason, file store", FileStore, false, true, Fails},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewModel(Setup{Generation: Modern, Store: tt.store, Nodes: 1})
			holder := m.Incarnate("web-1", node1, "sandbox-1")
			m.Apply(Call{Verb: Add, Node: node1, Att: holder}, Outcome{IPs: []netip.Addr{netip.MustParseAddr("10.97.0.1")}})
			a := m.Incarnate("web-3", node1, "sandbox-2")
			msg := Network + "/sandbox-2/eth0: calico-ipam gave 10.97.0.1/30, which " + Network + "/sandbox-1/eth0 holds (it was freed behind that attachment's back)"
			if tt.notAFence {
				msg = "record store: etcd unavailable"
			}
			m.Apply(Call{Verb: Add, Node: node1, Att: a}, Outcome{Code: 11, Msg: msg})
			if tt.holderReleased {
				m.Apply(Call{Verb: Del, Node: node1, Att: holder}, Outcome{})
			}
			del := Call{Verb: Del, Node: node1, Att: a, Outage: true}
			if got := outageExpect(tt.store, del); got != tt.want {
				t.Errorf("DEL during an outage must give %s, model expects %s", tt.want, got)
			}
		})
	}
}
