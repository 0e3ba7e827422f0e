package calicosim

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
)

// The run kdd-samples.json records: its pool starts with the block real
// Calico chose for node1, so the simulator's first free block is the same.
var replayPool = poolSpec{"default-ipv4-ippool", "10.244.166.128/25", 26}

type replayStep struct {
	mode HandleMode
	del  bool
	pod  pod
	want string // the address ADD returns
}

// replaySteps are KDD.md's five steps.
var replaySteps = []replayStep{
	{ModernHandles, false, pod{"aaa111", "default", "web-0"}, "10.244.166.128"},
	{ModernHandles, false, pod{"bbb222", "default", "web-1"}, "10.244.166.129"},
	{LegacyHandles, false, pod{"ccc333", "default", "web-2"}, "10.244.166.130"},
	{LegacyHandles, false, pod{"ddd444", "default", "web-2"}, "10.244.166.131"},
	{ModernHandles, true, pod{"aaa111", "default", "web-0"}, ""},
}

// TestKDDReplayMatchesSamples replays the recorded run and compares the
// objects after step 1 and after step 5 with what real calico-ipam wrote.
func TestKDDReplayMatchesSamples(t *testing.T) {
	samples := loadKDDSamples(t)
	k := newKDD(t, replayPool)
	for i, st := range replaySteps {
		if st.del {
			k.mustDel(st.mode, st.pod)
		} else if got := k.mustAdd(st.mode, st.pod); got.String() != st.want {
			t.Fatalf("step %d: ADD %s got %s, want %s", i+1, st.pod.container, got, st.want)
		}
		switch i {
		case 0:
			compareObjects(t, "after step 1", k.objects(), samples[0])
		case len(replaySteps) - 1:
			compareObjects(t, "after step 5", k.objects(), samples[1])
		}
	}
	if bad := k.state().Inconsistencies(); len(bad) > 0 {
		t.Errorf("handles and blocks disagree: %v", bad)
	}
}

// loadKDDSamples returns each step's objects by "Kind/name", decoded with
// exact numbers.
func loadKDDSamples(t *testing.T) []map[string]map[string]any {
	t.Helper()
	data, err := os.ReadFile(calicodata.Require(t, calicodata.KDDSamples))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Steps []struct {
			Objects []map[string]any `json:"objects"`
		} `json:"steps"`
	}
	if err := exactJSON(data, &doc); err != nil {
		t.Fatal(err)
	}
	var out []map[string]map[string]any
	for _, st := range doc.Steps {
		byName := map[string]map[string]any{}
		for _, o := range st.Objects {
			byName[o["kind"].(string)+"/"+o["metadata"].(map[string]any)["name"].(string)] = o
		}
		out = append(out, byName)
	}
	if len(out) != 2 {
		t.Fatalf("kdd-samples.json has %d steps, want 2", len(out))
	}
	return out
}

func exactJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return dec.Decode(v)
}

// compareObjects checks got against want: the same objects; apiVersion,
// names, labels, annotations, generation and spec equal, except values
// that depend on the clock, whose form and relations are checked instead.
func compareObjects(t *testing.T, when string, got, want map[string]map[string]any) {
	t.Helper()
	if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)); !slices.Equal(g, w) {
		t.Errorf("%s: objects %v, want %v", when, g, w)
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			continue
		}
		var gn, wn map[string]any
		if err := exactJSON(mustMarshal(t, g), &gn); err != nil {
			t.Fatal(err)
		}
		if err := exactJSON(mustMarshal(t, w), &wn); err != nil {
			t.Fatal(err)
		}
		gs, ws := comparable(t, gn), comparable(t, wn)
		if !reflect.DeepEqual(gs, ws) {
			t.Errorf("%s: %s differs:\n got %s\nwant %s", when, name, mustMarshal(t, gs), mustMarshal(t, ws))
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// comparable keeps what must match exactly and replaces clock-derived
// values by what must hold of them.
func comparable(t *testing.T, o map[string]any) map[string]any {
	t.Helper()
	md := o["metadata"].(map[string]any)
	spec := maps.Clone(o["spec"].(map[string]any))
	if ts, ok := spec["affinityClaimTime"].(string); ok {
		c, err := time.Parse(time.RFC3339, ts)
		spec["affinityClaimTime"] = err == nil && c.Equal(c.Truncate(time.Second)) && c.Location() == time.UTC
	}
	if seq, ok := spec["sequenceNumber"]; ok {
		spec["sequenceNumber"], spec["sequenceNumberForAllocation"] = sequenceRelations(t, seq, spec["sequenceNumberForAllocation"])
	}
	if attrs, ok := spec["attributes"].([]any); ok {
		spec["attributes"] = stampsChecked(attrs)
	}
	return map[string]any{
		"apiVersion": o["apiVersion"], "kind": o["kind"], "spec": spec,
		"name": md["name"], "labels": md["labels"], "annotations": md["annotations"], "generation": md["generation"],
	}
}

// sequenceRelations returns, instead of the block's sequence numbers,
// how far each allocation's number lies behind the block's (a count of
// later changes, the same in any run of the steps).
func sequenceRelations(t *testing.T, seq, perOrdinal any) (string, map[string]int64) {
	t.Helper()
	s, err := strconv.ParseInt(string(seq.(json.Number)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	behind := map[string]int64{}
	for ord, v := range perOrdinal.(map[string]any) {
		at, err := strconv.ParseInt(string(v.(json.Number)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		behind[ord] = s - at
	}
	return "a positive number", behind
}

// stampsChecked replaces each attribute's timestamp by whether it has
// Go's time.Time String form in UTC, as Calico writes it.
func stampsChecked(attrs []any) []any {
	out := make([]any, len(attrs))
	for i, a := range attrs {
		attr := maps.Clone(a.(map[string]any))
		if sec, ok := attr["secondary"].(map[string]any); ok {
			sec = maps.Clone(sec)
			ts, _ := sec["timestamp"].(string)
			_, err := time.Parse("2006-01-02 15:04:05.999999999 -0700 MST", ts)
			sec["timestamp"] = err == nil
			attr["secondary"] = sec
		}
		out[i] = attr
	}
	return out
}
