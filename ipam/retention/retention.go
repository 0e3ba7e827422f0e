// Package retention holds GC's rules: which of a node's records a collection
// keeps, and why. The GC verb and `safe-ipam gc` both judge by Why, so the
// two can never disagree about what is garbage.
package retention

import (
	"fmt"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/record"
)

// Rules are what a collection knows besides the record.
type Rules struct {
	// Listed says whether the runtime (or a liveness source) lists the
	// record's attachment as running.
	Listed func(containerID, ifname string) bool
	Now    time.Time
	// Grace is the config's gcGracePeriod.
	Grace time.Duration
	// YoungWritten keeps any record written less than Grace ago: for a
	// collection from outside the runtime, whose source may not list a
	// sandbox whose RunPodSandbox has not returned yet.
	YoungWritten bool
	// Host is the host this collection judges for (record.ThisHost): a
	// record another host wrote is kept, since this host's runtime says
	// nothing about it. "" judges every record (the dead-node sweep,
	// whose evidence is the node's death, not a runtime).
	Host string
}

// Why says why rec is kept, or "" when it is garbage.
func (r Rules) Why(rec *record.Record) string {
	switch {
	case r.OtherHost(rec):
		return fmt.Sprintf("written by host %s under this node's Calico name: a stale nodename?", rec.Host)
	case r.Listed(rec.ContainerID, rec.IfName):
		return "listed as running"
	// A pending record is an ADD in flight, not garbage, while its process
	// runs or while it is young.
	case rec.State == record.Pending && rec.Owner.Alive():
		return "pending: the ADD that wrote it still runs"
	case rec.State == record.Pending && r.Now.Sub(rec.Created) < r.Grace:
		return fmt.Sprintf("pending for less than gcGracePeriod (%s): an ADD in flight", r.Grace)
	case r.YoungWritten && r.Now.Sub(lastWritten(rec)) < r.Grace:
		return fmt.Sprintf("written less than gcGracePeriod (%s) ago: its sandbox may not be listed yet", r.Grace)
	}
	return ""
}

// OtherHost says whether rec was written by another host than the one
// judging: two machines under one Calico node name (a stale nodename)
// share one node's records. A record without Host is judged as before.
func (r Rules) OtherHost(rec *record.Record) bool {
	return r.Host != "" && rec.Host != "" && rec.Host != r.Host
}

// lastWritten is when rec was created or last changed.
func lastWritten(rec *record.Record) time.Time {
	if rec.Updated.After(rec.Created) {
		return rec.Updated
	}
	return rec.Created
}
