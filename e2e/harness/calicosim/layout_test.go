package calicosim

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// briefBlock is BRIEF.md's block written by calico-ipam after ADDs of
// web-0 and web-1 and an ADD+DEL of a third pod, arrays written out.
var briefBlock = `{"cidr":"10.244.166.128/26","affinity":"host:node1","affinity_claim_time":"2026-11-21T18:29:54Z",` +
	`"allocations":[0,1` + strings.Repeat(",null", 62) + `],` +
	`"unallocated":[` + intRange(3, 63) + `,2],` +
	`"attributes":[{"handle_id":"k8s-pod-network.0f1e2d3c4b5a","secondary":{"namespace":"default","node":"node1","pod":"web-0","timestamp":"2026-11-21 18:29:54.161129131 +0000 UTC"}},` +
	`{"handle_id":"k8s-pod-network.9a8b7c6d5e4f","secondary":{"namespace":"default","node":"node1","pod":"web-1","timestamp":"2026-11-21 18:29:54.193792229 +0000 UTC"}}],` +
	`"sequenceNumber":1795285794169824573,"sequenceNumberForAllocation":{"0":1795285794169824569,"1":1795285794169824570},"deleted":false}`

func intRange(from, to int) string {
	parts := []string{}
	for i := from; i <= to; i++ {
		parts = append(parts, strconv.Itoa(i))
	}
	return strings.Join(parts, ",")
}

// TestBriefLayout replays BRIEF's sequence and compares the etcd values
// byte for byte, after checking and replacing the clock-derived fields.
func TestBriefLayout(t *testing.T) {
	// A /25 pool whose first block is BRIEF's 10.244.166.128/26.
	s := newSim(t, poolSpec{"default-ipv4-ippool", "10.244.166.128/25", 26})
	start := time.Now()
	web0 := pod{"0f1e2d3c4b5a", "default", "web-0"}
	web1 := pod{"9a8b7c6d5e4f", "default", "web-1"}
	web2 := pod{"5e5e5e5e5e5e", "default", "web-2"}
	for _, p := range []pod{web0, web1, web2} {
		s.mustAdd(ModernHandles, p)
	}
	s.mustDel(ModernHandles, web2)
	end := time.Now()

	exact := []struct{ key, want string }{
		{"/calico/ipam/v2/host/node1/ipv4/block/10.244.166.128-26", `{"state":"confirmed","deleted":false}`},
		{"/calico/ipam/v2/handle/k8s-pod-network.0f1e2d3c4b5a", `{"block":{"10.244.166.128/26":1},"deleted":false}`},
		{"/calico/ipam/v2/handle/k8s-pod-network.9a8b7c6d5e4f", `{"block":{"10.244.166.128/26":1},"deleted":false}`},
		{"/calico/ipam/v2/handle/k8s-pod-network.5e5e5e5e5e5e", ""},
	}
	for _, e := range exact {
		if got := s.value(e.key); got != e.want {
			t.Errorf("%s\n got: %q\nwant: %q", e.key, got, e.want)
		}
	}
	got := s.value("/calico/ipam/v2/assignment/ipv4/block/10.244.166.128-26")
	norm, err := normaliseBlock(got, start, end)
	if err != nil {
		t.Fatalf("%v\nblock: %s", err, got)
	}
	if norm != briefBlock {
		t.Errorf("block differs from BRIEF after normalising clock fields\n got: %s\nwant: %s", norm, briefBlock)
	}
}

var (
	claimRE = regexp.MustCompile(`"affinity_claim_time":"([^"]*)"`)
	stampRE = regexp.MustCompile(`"timestamp":"([^"]*)"`)
	seqRE   = regexp.MustCompile(`"sequenceNumber":(\d+),"sequenceNumberForAllocation":\{"0":(\d+),"1":(\d+)\}`)
)

// normaliseBlock checks the fields that depend on the clock and replaces
// them with BRIEF's values: the claim time is whole seconds UTC, the
// timestamps are Go's time.String of a UTC time, the sequence numbers
// start from the clock and count 2 allocations and 1 release past the
// third allocation.
func normaliseBlock(block string, start, end time.Time) (string, error) {
	inWindow := func(t time.Time, slack time.Duration) bool {
		return !t.Before(start.Add(-slack)) && !t.After(end.Add(slack))
	}
	m := claimRE.FindStringSubmatch(block)
	if m == nil {
		return "", fmt.Errorf("no affinity_claim_time")
	}
	claim, err := time.Parse("2006-01-02T15:04:05Z", m[1])
	if err != nil || !inWindow(claim, time.Second) {
		return "", fmt.Errorf("claim time %q not whole-second UTC within the test (%v)", m[1], err)
	}
	block = strings.Replace(block, m[0], `"affinity_claim_time":"2026-11-21T18:29:54Z"`, 1)

	briefStamps := []string{"2026-11-21 18:29:54.161129131 +0000 UTC", "2026-11-21 18:29:54.193792229 +0000 UTC"}
	stamps := stampRE.FindAllStringSubmatch(block, -1)
	if len(stamps) != len(briefStamps) {
		return "", fmt.Errorf("%d timestamps, want %d", len(stamps), len(briefStamps))
	}
	for i, st := range stamps {
		ts, err := time.Parse("2006-01-02 15:04:05.999999999 -0700 MST", st[1])
		if err != nil || ts.UTC().String() != st[1] || !inWindow(ts, 0) {
			return "", fmt.Errorf("timestamp %q is not time.String of a UTC time within the test (%v)", st[1], err)
		}
		block = strings.Replace(block, st[0], `"timestamp":"`+briefStamps[i]+`"`, 1)
	}

	seq := seqRE.FindStringSubmatch(block)
	if seq == nil {
		return "", fmt.Errorf("sequence numbers not in the expected shape")
	}
	n := make([]uint64, 3)
	for i := range n {
		n[i], _ = strconv.ParseUint(seq[i+1], 10, 64)
	}
	first := n[1]
	if !inWindow(time.Unix(0, int64(first)), 0) || n[2] != first+1 || n[0] != first+4 {
		return "", fmt.Errorf("sequence numbers %v: want clock-based first, first+1 and first+4", n)
	}
	return strings.Replace(block, seq[0], `"sequenceNumber":1795285794169824573,"sequenceNumberForAllocation":{"0":1795285794169824569,"1":1795285794169824570}`, 1), nil
}

// TestSeededResourcesMatchBrief checks SeedIPPool and SeedNode write
// BRIEF's JSON, apart from the generated uid and creation time.
func TestSeededResourcesMatchBrief(t *testing.T) {
	s := newSim(t, poolSpec{"default-ipv4-ippool", "10.244.0.0/16", 26})
	uidRE := regexp.MustCompile(`"uid":"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"`)
	tsRE := regexp.MustCompile(`"creationTimestamp":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"`)
	tests := []struct{ key, want string }{
		{calico.IPPoolKey("default-ipv4-ippool"), `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"default-ipv4-ippool","uid":"2c3a1d2e-0000-0000-0000-000000000001","creationTimestamp":"2026-11-21T00:00:00Z"},"spec":{"cidr":"10.244.0.0/16","ipipMode":"Never","vxlanMode":"Never","natOutgoing":true,"blockSize":26,"nodeSelector":"all()","allowedUses":["Workload","Tunnel"]}}`},
		{calico.NodeKey(node1), `{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"node1","uid":"2c3a1d2e-0000-0000-0000-000000000002","creationTimestamp":"2026-11-21T00:00:00Z"},"spec":{}}`},
	}
	for _, tt := range tests {
		got := s.value(tt.key)
		wantUID := regexp.MustCompile(`"uid":"[^"]*"`).FindString(tt.want)
		norm := uidRE.ReplaceAllString(got, wantUID)
		norm = tsRE.ReplaceAllString(norm, `"creationTimestamp":"2026-11-21T00:00:00Z"`)
		if norm != tt.want {
			t.Errorf("%s\n got: %s\nwant: %s", tt.key, got, tt.want)
		}
	}
}
