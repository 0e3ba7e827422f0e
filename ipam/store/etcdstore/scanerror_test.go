package etcdstore

import (
	"errors"
	"testing"
)

// A listing that decodes each page while the next is read still says a
// record that does not decode, even when the read after it failed: the
// audit must report the damage, not an unavailable store.
func TestScanErrorPrefersARecordThatDoesNotDecode(t *testing.T) {
	damaged := decodeError{errors.New("record x: does not decode")}
	readFailed := errors.New("etcd: request timed out")
	for _, tc := range []struct {
		name        string
		scan, flush error
		want        error
		flushed     bool
	}{
		{"all read, all kept", nil, nil, nil, true},
		{"all read, the last page damaged", nil, damaged, damaged, true},
		{"a read failed after a damaged page", readFailed, damaged, damaged, true},
		{"a read failed", readFailed, nil, readFailed, true},
		{"a kept page was damaged", damaged, nil, damaged, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flushed := false
			got := scanError(tc.scan, func() error { flushed = true; return tc.flush })
			if got != tc.want || flushed != tc.flushed {
				t.Errorf("scanError = %v (flushed %v); want %v (flushed %v)", got, flushed, tc.want, tc.flushed)
			}
		})
	}
}
