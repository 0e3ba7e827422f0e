package builds

import (
	"strconv"
	"testing"
	"time"
)

// A call handed over to the etcd build keeps its start: the parse and
// the hand-over count against one ipam.verbTimeout. Only a hand-over
// carries a start, and only an earlier one is taken.
func TestAHandedOverCallKeepsItsStart(t *testing.T) {
	now := time.Now()
	earlier := now.Add(-3 * time.Second)
	tests := []struct {
		name, by, started string
		want              time.Time
	}{
		{"not handed over", "", strconv.FormatInt(earlier.UnixNano(), 10), now},
		{"handed over", "/opt/cni/bin/safe-ipam", strconv.FormatInt(earlier.UnixNano(), 10), earlier},
		{"a start after now", "/opt/cni/bin/safe-ipam", strconv.FormatInt(now.Add(time.Hour).UnixNano(), 10), now},
		{"a start that does not parse", "/opt/cni/bin/safe-ipam", "soon", now},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(HandedOverEnv, tt.by)
			t.Setenv(startedEnv, tt.started)
			if got := CallStarted(now); !got.Equal(tt.want) {
				t.Fatalf("CallStarted = %v; want %v", got, tt.want)
			}
		})
	}
}
