package calico

import (
	"net/netip"
	"testing"
)

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBlockAndAffinityKeys(t *testing.T) {
	tests := []struct {
		cidr     string
		block    string
		affinity string
	}{
		{"10.244.166.128/26", "/calico/ipam/v2/assignment/ipv4/block/10.244.166.128-26", "/calico/ipam/v2/host/node1/ipv4/block/10.244.166.128-26"},
		{"fd00:10:244::/122", "/calico/ipam/v2/assignment/ipv6/block/fd00:10:244::-122", "/calico/ipam/v2/host/node1/ipv6/block/fd00:10:244::-122"},
		{"fd00:10:244::40/122", "/calico/ipam/v2/assignment/ipv6/block/fd00:10:244::40-122", "/calico/ipam/v2/host/node1/ipv6/block/fd00:10:244::40-122"},
		{"192.168.91.0/32", "/calico/ipam/v2/assignment/ipv4/block/192.168.91.0-32", "/calico/ipam/v2/host/node1/ipv4/block/192.168.91.0-32"},
	}
	for _, tt := range tests {
		t.Run(tt.cidr, func(t *testing.T) {
			cidr := mustPrefix(t, tt.cidr)
			if got := BlockKey(cidr); got != tt.block {
				t.Errorf("BlockKey = %q, want %q", got, tt.block)
			}
			if got, err := ParseBlockKey(tt.block); err != nil || got != cidr {
				t.Errorf("ParseBlockKey = %v, %v; want %v", got, err, cidr)
			}
			if got := AffinityKey("node1", cidr); got != tt.affinity {
				t.Errorf("AffinityKey = %q, want %q", got, tt.affinity)
			}
			node, got, err := ParseAffinityKey(tt.affinity)
			if err != nil || node != "node1" || got != cidr {
				t.Errorf("ParseAffinityKey = %q, %v, %v; want node1, %v", node, got, err, cidr)
			}
		})
	}
}

func TestNamedKeys(t *testing.T) {
	tests := []struct {
		name  string
		build func(string) string
		parse func(string) (string, error)
		id    string
		key   string
	}{
		{"handle", HandleKey, ParseHandleKey, "k8s-pod-network.0f1e2d3c4b5a", "/calico/ipam/v2/handle/k8s-pod-network.0f1e2d3c4b5a"},
		{"legacy handle", HandleKey, ParseHandleKey, "default.web-0", "/calico/ipam/v2/handle/default.web-0"},
		{"ippool", IPPoolKey, ParseIPPoolKey, "default-ipv4-ippool", "/calico/resources/v3/projectcalico.org/ippools/default-ipv4-ippool"},
		{"node", NodeKey, ParseNodeKey, "node1", "/calico/resources/v3/projectcalico.org/nodes/node1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.build(tt.id); got != tt.key {
				t.Errorf("key = %q, want %q", got, tt.key)
			}
			if got, err := tt.parse(tt.key); err != nil || got != tt.id {
				t.Errorf("parse = %q, %v; want %q", got, err, tt.id)
			}
		})
	}
}

func TestParseBadKeys(t *testing.T) {
	tests := []struct {
		name  string
		parse func(string) error
		key   string
	}{
		{"block under handle prefix", blockErr, "/calico/ipam/v2/handle/x"},
		{"block without length", blockErr, "/calico/ipam/v2/assignment/ipv4/block/10.0.0.0"},
		{"block with wrong family", blockErr, "/calico/ipam/v2/assignment/ipv6/block/10.0.0.0-26"},
		{"block with unknown family", blockErr, "/calico/ipam/v2/assignment/ipv5/block/10.0.0.0-26"},
		{"affinity too short", affinityErr, "/calico/ipam/v2/host/node1/ipv4/10.0.0.0-26"},
		{"affinity without node", affinityErr, "/calico/ipam/v2/host//ipv4/block/10.0.0.0-26"},
		{"empty handle", func(k string) error { _, err := ParseHandleKey(k); return err }, "/calico/ipam/v2/handle/"},
		{"node under pools", func(k string) error { _, err := ParseNodeKey(k); return err }, IPPoolKey("p")},
		{"nested pool name", func(k string) error { _, err := ParseIPPoolKey(k); return err }, IPPoolKey("a/b")},
	}
	for _, tt := range tests {
		if err := tt.parse(tt.key); err == nil {
			t.Errorf("%s: %q parsed without error", tt.name, tt.key)
		}
	}
}

func blockErr(k string) error    { _, err := ParseBlockKey(k); return err }
func affinityErr(k string) error { _, _, err := ParseAffinityKey(k); return err }
