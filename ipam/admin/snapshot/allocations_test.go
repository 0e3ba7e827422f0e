package snapshot

import (
	"testing"
	"time"
)

// An allocation's time is the attribute's, whatever it is: a far future
// one must stay in the future (its ADD may still be running), the epoch
// must not read as none, the zero time must.
func TestAllocationTime(t *testing.T) {
	for _, s := range []string{
		"2026-11-26 14:00:00.123456789 +0000 UTC", "3000-01-01 00:00:00 +0000 UTC", "1970-01-01 00:00:00 +0000 UTC",
		"1600-01-01 00:00:00 +0000 UTC", "0001-01-01 00:00:00 +0000 UTC", "2026-11-26 15:00:00 +0100 CET",
	} {
		ts, err := time.Parse(calicoTime, s)
		if err != nil {
			t.Fatal(err)
		}
		var al Allocation
		al.setTime(ts)
		if got := al.Time(); !got.Equal(ts) || got.IsZero() != ts.IsZero() {
			t.Errorf("%s: Time() = %v; want %v", s, got, ts)
		}
	}
	if got := (&Allocation{}).Time(); !got.IsZero() {
		t.Errorf("no timestamp: Time() = %v; want zero", got)
	}
}
