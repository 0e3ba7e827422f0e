package record

import (
	"strings"
	"testing"
)

func TestSharedWithIsChecked(t *testing.T) {
	att := Attachment{Network: "net1", ContainerID: "c1", IfName: "eth0"}
	peer := &Peer{Attachment: Attachment{Network: "net1", ContainerID: "c0", IfName: "eth0"}, Node: "node2"}
	tests := []struct {
		name    string
		handle  string
		with    *Peer
		wantErr string
	}{
		{"none", "net1.c1", nil, ""},
		{"a VM's handle", "net1.vmi.default.vm1", peer, ""},
		{"a container's handle", "net1.c1", peer, "not a shared one"},
		{"another network's VM", "net2.vmi.default.vm1", peer, "not a shared one"},
		{"a peer on another network", "net1.vmi.default.vm1", &Peer{Attachment: Attachment{Network: "net2", ContainerID: "c0", IfName: "eth0"}}, "not on network"},
		{"a peer with a bad node", "net1.vmi.default.vm1", &Peer{Attachment: peer.Attachment, Node: "a/b"}, "node name"},
		{"a peer with a bad container ID", "net1.vmi.default.vm1", &Peer{Attachment: Attachment{Network: "net1", ContainerID: "../x", IfName: "eth0"}}, "container ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Record{Attachment: att, Handle: tt.handle, SharedWith: tt.with}
			err := r.CheckStored(att, "")
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("CheckStored = %v; want %q", err, tt.wantErr)
			}
		})
	}
}

func TestShares(t *testing.T) {
	vm := func(cid, handle string) *Record {
		return &Record{Attachment: Attachment{Network: "net1", ContainerID: cid, IfName: "eth0"}, Handle: handle, Node: "n1"}
	}
	a, b := vm("a", "net1.vmi.default.vm1"), vm("b", "net1.vmi.default.vm1")
	if !a.Shares(b) || a.Shares(vm("c", "net1.vmi.default.vm2")) || vm("d", "net1.d").Shares(vm("e", "net1.d")) {
		t.Fatal("Shares: only records under one VM handle share")
	}
	if b.TakesOver(a) {
		t.Fatal("a record that names no peer takes nothing over")
	}
	b.SharedWith = &Peer{Attachment: a.Attachment, Node: a.Node}
	if !b.TakesOver(a) || b.TakesOver(vm("c", "net1.vmi.default.vm1")) {
		t.Fatal("TakesOver: only from the peer it names")
	}
}
