package record

import (
	"strings"
	"testing"
)

// A record read back from a store is input (docs/security.md, "Values
// read from the store are input"): each field a DEL or GC acts on must be
// one a safe-ipam ADD could have written under the key it is stored at.
func TestCheckStoredRefusesWhatNoADDWrote(t *testing.T) {
	att := Attachment{Network: "k8s-pod-network", ContainerID: "c1", IfName: "eth0"}
	good := func() *Record {
		return &Record{Attachment: att, Node: "node1", PodNamespace: "default", PodName: "web-0", Handle: "k8s-pod-network.c1", IPs: []string{"10.244.0.7/26"}}
	}
	tests := []struct {
		name   string
		change func(r *Record)
		node   string // the node the store keeps it under ("" for a store that keys no node)
		refuse string
	}{
		{"as an ADD wrote it", func(*Record) {}, "node1", ""},
		{"in a store that keys no node", func(*Record) {}, "", ""},
		{"another attachment than its key", func(r *Record) { r.ContainerID = "victim" }, "node1", "names"},
		{"another node than it is stored under", func(r *Record) { r.Node = "node2" }, "node1", "not the node it is stored under"},
		{"a pod name with ';'", func(r *Record) { r.PodName = "web-0;K8S_POD_NAME=victim" }, "node1", "podName"},
		{"a pod name with a control character", func(r *Record) { r.PodName = "web-\x1b[2J" }, "node1", "podName"},
		{"a pod UID longer than CNI_ARGS carries", func(r *Record) { r.PodUID = strings.Repeat("u", 513) }, "node1", "podUID"},
		{"an address that does not parse", func(r *Record) { r.IPs = []string{"10.244.0.300/26"} }, "node1", "does not parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := good()
			tt.change(r)
			err := r.CheckStored(att, tt.node)
			if tt.refuse == "" && err != nil || tt.refuse != "" && (err == nil || !strings.Contains(err.Error(), tt.refuse)) {
				t.Fatalf("CheckStored = %v; want %q", err, tt.refuse)
			}
		})
	}
}
