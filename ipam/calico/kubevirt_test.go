package calico

import (
	"encoding/json"
	"net/netip"
	"testing"
)

// The alternate owner round-trips through the block's JSON, and changing
// one ordinal's owners leaves an ordinal sharing its attribute alone.
func TestUpdateAttributeKeepsOthers(t *testing.T) {
	b, err := NewBlock(netip.MustParsePrefix("10.0.0.0/30"), 0)
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{AttrNamespace: "default", AttrPod: "virt-launcher-vm1-a"}
	ords, err := b.Allocate(2, "net.vmi.default.vm1", owner)
	if err != nil {
		t.Fatal(err)
	}
	target := map[string]string{AttrNamespace: "default", AttrPod: "virt-launcher-vm1-b"}
	b.UpdateAttribute(ords[0], func(a *Attribute) { a.SetAlternate(target) })
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	var back Block
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	a0, _ := back.Attribute(ords[0])
	a1, _ := back.Attribute(ords[1])
	if !OwnedBy(a0.Alternate(), "default", "virt-launcher-vm1-b") || !OwnedBy(a0.Secondary, "default", "virt-launcher-vm1-a") {
		t.Errorf("ordinal %d owners %v / %v", ords[0], a0.Secondary, a0.Alternate())
	}
	if a1.Alternate() != nil || !OwnedBy(a1.Secondary, "default", "virt-launcher-vm1-a") {
		t.Errorf("ordinal %d changed too: %v / %v", ords[1], a1.Secondary, a1.Alternate())
	}
	back.UpdateAttribute(ords[0], func(a *Attribute) { a.SetAlternate(nil); a.Secondary = nil })
	if a, _ := back.Attribute(ords[0]); a.Alternate() != nil || len(a.Secondary) != 0 || a.Handle() != "net.vmi.default.vm1" {
		t.Errorf("cleared owners: %+v", a)
	}
}
