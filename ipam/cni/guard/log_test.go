package guard_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// Issue 22: the ADD log line named the handle safe-ipam's DEL releases as
// if it were the one Calico stored. It is "expectedHandle" unless it was
// read from Calico's data (a KubeVirt VM's).
func TestADDLogSaysTheHandleIsExpected(t *testing.T) {
	r := newRig(t, "file")
	var buf bytes.Buffer
	g := r.guardLogging(r.store(), r.conf(), slog.New(slog.NewTextHandler(&buf, nil)))
	if _, err := g.Add(context.Background(), env("c1")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "expectedHandle=net1.c1") || strings.Contains(buf.String(), " handle=") {
		t.Fatalf("ADD log:\n%s\nwant expectedHandle=net1.c1, no handle=", buf.String())
	}
}
