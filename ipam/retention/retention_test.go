package retention

import (
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/record"
)

func TestWhy(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	dead := &record.Owner{PID: 1 << 30, Boot: "not-this-boot"}
	rec := func(cid string, state record.State, age, updatedAge time.Duration, owner *record.Owner) *record.Record {
		return &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: cid, IfName: "eth0"},
			State: state, Created: now.Add(-age), Updated: now.Add(-updatedAge), Owner: owner}
	}
	listed := func(cid, ifname string) bool { return cid == "running" && ifname == "eth0" }
	tests := []struct {
		name         string
		rec          *record.Record
		youngWritten bool
		want         string // in the reason; "" is garbage
	}{
		{"listed", rec("running", record.Committed, time.Hour, time.Hour, nil), false, "listed as running"},
		{"listed, other interface", &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: "running", IfName: "net1"}, State: record.Committed, Created: now.Add(-time.Hour)}, false, ""},
		{"pending, its ADD runs", rec("c", record.Pending, time.Hour, time.Hour, record.Self()), false, "still runs"},
		{"pending, young", rec("c", record.Pending, time.Second, time.Second, dead), false, "pending for less than gcGracePeriod"},
		{"pending, old and ownerless", rec("c", record.Pending, time.Hour, time.Hour, dead), false, ""},
		{"committed, young: the verb collects it", rec("c", record.Committed, time.Second, time.Second, nil), false, ""},
		{"committed, young: gc from outside keeps it", rec("c", record.Committed, time.Second, time.Second, nil), true, "written less than gcGracePeriod"},
		{"committed long ago, changed just now", rec("c", record.Committed, time.Hour, time.Second, nil), true, "written less than gcGracePeriod"},
		{"committed, old, not listed", rec("c", record.Committed, time.Hour, time.Hour, nil), true, ""},
		{"releasing, not listed", rec("c", record.Releasing, time.Hour, time.Hour, nil), false, ""},
		{"another host's, not listed", onHost("node-b", rec("c", record.Committed, time.Hour, time.Hour, nil)), true, "written by host node-b"},
		{"another host's releasing record", onHost("node-b", rec("c", record.Releasing, time.Hour, time.Hour, nil)), false, "a stale nodename"},
		{"this host's, not listed", onHost("node-a", rec("c", record.Committed, time.Hour, time.Hour, nil)), true, ""},
		{"no host (an older record), not listed", onHost("", rec("c", record.Committed, time.Hour, time.Hour, nil)), true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Rules{Listed: listed, Now: now, Grace: time.Minute, YoungWritten: tt.youngWritten, Host: "node-a"}.Why(tt.rec)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("Why = %q, want %q", got, tt.want)
			}
		})
	}
}

func onHost(host string, rec *record.Record) *record.Record {
	rec.Host = host
	return rec
}

// TestWhyWithoutHost: rules with no host (the dead-node sweep) judge
// every record, whoever wrote it.
func TestWhyWithoutHost(t *testing.T) {
	rec := &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: "c", IfName: "eth0"}, Host: "node-b", State: record.Committed}
	never := func(string, string) bool { return false }
	if why := (Rules{Listed: never, Now: time.Now()}).Why(rec); why != "" {
		t.Errorf("Why = %q, want garbage", why)
	}
}
