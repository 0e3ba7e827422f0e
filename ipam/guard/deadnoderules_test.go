package guard

import (
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/record"
)

// A gone node's records are judged by its death, whichever host wrote
// them: the GC rules of a live node keep another host's record, the dead
// node's rules (the sweep's, and an ADD settling a dead holder) do not.
func TestDeadNodeRulesJudgeEveryHost(t *testing.T) {
	g := New(Parts{Config: &config.Config{GCGracePeriod: time.Minute}, Node: "node1"})
	old := time.Now().Add(-time.Hour)
	tests := []struct {
		host string
		live string // why the live node's rules keep it
	}{
		{"", ""},
		{record.ThisHost(), ""},
		{"other-machine", "written by host other-machine"},
	}
	for _, tt := range tests {
		rec := &record.Record{Host: tt.host, State: record.Committed, Created: old, Updated: old}
		if why := g.DeadNodeRules().Why(rec); why != "" {
			t.Errorf("host %q: the dead node's rules keep it: %s", tt.host, why)
		}
		never := func(string, string) bool { return false }
		if why := g.GCRules(never, false).Why(rec); (tt.live == "") != (why == "") || tt.live != "" && !strings.Contains(why, tt.live) {
			t.Errorf("host %q: a live node's rules say %q, want %q", tt.host, why, tt.live)
		}
	}
}
