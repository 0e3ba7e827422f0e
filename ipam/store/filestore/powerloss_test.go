//go:build crashpoints

package filestore

import (
	"context"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Issue 31, item 6: Quarantine syncs the holder's data, not only its
// name, since the quarantined attachment's DEL answers from the
// quarantine and the holder's record is then all that releases it. A
// power loss right after keeps the holder listing the quarantine (run
// with -tags crashpoints).
func TestQuarantineSurvivesAPowerLoss(t *testing.T) {
	DropUnsynced() // forget what earlier tests noted
	s, holder, late := openQuarantined(t)
	DropUnsynced()
	if got, err := s.Get(context.Background(), holder); err != nil || !listsQuarantine(got, late) || got.State != record.Committed {
		t.Fatalf("the holder after a power loss = %+v, %v; want it committed, listing late's quarantine", got, err)
	}
}
