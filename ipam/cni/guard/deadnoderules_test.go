package guard

import (
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// A gone node's records are judged by its death, whichever host wrote
// them: a live node's runtime keeps another host's record in a store
// machines share, the dead node's evidence (the sweep's, and an ADD
// settling a dead holder) does not.
func TestDeadNodeWitnessJudgesEveryHost(t *testing.T) {
	g := New(Parts{Config: &config.Config{GCGracePeriod: time.Minute}, Node: "node1"})
	old := time.Now().Add(-time.Hour)
	runtime := &rulebook.Listing{Source: "the runtime", Node: "node1", Host: record.ThisHost(), Entries: 1}
	tests := []struct {
		host string
		live string // why the live node's runtime keeps it
	}{
		{"", ""},
		{record.ThisHost(), ""},
		{"other-machine", "written by host other-machine"},
	}
	for _, tt := range tests {
		rec := &record.Record{Host: tt.host, Node: "node1", State: record.Committed, Created: old, Updated: old}
		if v := g.DeadNodeWitness(&rulebook.Death{Noted: true, Passed: true}).Judge(rec); !v.Release {
			t.Errorf("host %q: the dead node's evidence keeps it: %s", tt.host, v.Why)
		}
		if v := g.DeadNodeWitness(&rulebook.Death{Noted: true}).Judge(rec); v.Release {
			t.Errorf("host %q: released before the noted grace passed", tt.host)
		}
		w := g.Witness(runtime, false)
		w.Shared = true
		if v := w.Judge(rec); v.Release != (tt.live == "") || tt.live != "" && !strings.Contains(v.Why, tt.live) {
			t.Errorf("host %q: a live node's runtime says %+v, want %q", tt.host, v, tt.live)
		}
	}
}
