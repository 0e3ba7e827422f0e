package guard

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/record"
)

// openGC opens the Guard safe-ipam gc uses, over the rig's config.
func (r *rig) openGC() *Guard {
	r.t.Helper()
	cfg, err := config.Parse(r.conf())
	if err != nil {
		r.t.Fatal(err)
	}
	g, err := OpenGC(context.Background(), &config.File{Path: "net1.conflist", Network: "net1", SafeIPAM: cfg}, binDir, slog.New(slog.DiscardHandler))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(g.Close)
	return g
}

// age makes a record look written d ago.
func (r *rig) age(cid string, d time.Duration) {
	r.t.Helper()
	rec := r.record(cid)
	was := *rec
	rec.Created, rec.Updated = rec.Created.Add(-d), rec.Updated.Add(-d)
	if _, err := r.store().Swap(context.Background(), rec.Attachment, &was, rec); err != nil {
		r.t.Fatal(err)
	}
}

func cids(recs []*record.Record) []string {
	var out []string
	for _, rec := range recs {
		out = append(out, rec.ContainerID)
	}
	slices.Sort(out)
	return out
}

// safe-ipam gc releases what the source does not list, as the GC verb
// does, and also keeps a committed record younger than gcGracePeriod: the
// runtime lists a sandbox only once RunPodSandbox returns, after its ADD
// committed.
func TestExternalGCPlanAndApply(t *testing.T) {
	forEachStore(t, func(t *testing.T, r *rig) {
		r.extraIPAM = map[string]any{"gcGracePeriod": "1m"}
		for _, cid := range []string{"listed", "gone", "creating"} {
			r.add(cid)
		}
		r.age("listed", 2*time.Minute)
		r.age("gone", 2*time.Minute)
		g := r.openGC()
		recs, err := g.ListForGC(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		// A source that names containers only: any ifname of "listed" runs.
		plan := g.PlanGC(recs, func(cid, _ string) bool { return cid == "listed" })
		if got := cids(plan.Release); !slices.Equal(got, []string{"gone"}) {
			t.Fatalf("plan releases %v, want [gone]", got)
		}
		why := map[string]string{}
		for _, k := range plan.Keep {
			why[k.Record.ContainerID] = k.Why
		}
		if !strings.Contains(why["listed"], "listed") || !strings.Contains(why["creating"], "gcGracePeriod") {
			t.Fatalf("kept: %v", why)
		}
		if n := len(r.records()); n != 3 || len(r.calls("DEL")) != 0 {
			t.Fatalf("planning changed something: %d records, %d DELs", n, len(r.calls("DEL")))
		}
		if err := g.ApplyGC(t.Context(), plan); err != nil {
			t.Fatal(err)
		}
		if got := cids(r.records()); !slices.Equal(got, []string{"creating", "listed"}) {
			t.Errorf("records after apply: %v", got)
		}
		if held := r.held(); len(held["net1.gone"]) != 0 || len(held["net1.listed"]) != 1 || len(held["net1.creating"]) != 1 {
			t.Errorf("delegate holds %v after apply; want gone released only", held)
		}
	})
}

// The GC verb keeps its own rules: a committed record that the runtime's
// valid list leaves out is collected however young it is.
func TestGCVerbCollectsYoungCommitted(t *testing.T) {
	r := newRig(t, "file")
	r.cniVersion = "1.1.0"
	r.extraIPAM = map[string]any{"gcGracePeriod": "1m"}
	r.add("fresh")
	if _, err := r.run("GC", Env{Path: binDir}, gcConf(t, r.conf())); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if recs := r.records(); len(recs) != 0 {
		t.Fatalf("records after GC: %v", cids(recs))
	}
}
