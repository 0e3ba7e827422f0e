package calico

import (
	"encoding/json"
	"testing"
)

// Attributes a, b and c of ordinals 0, 1 and 2 of a /29, as Calico with IP
// cooldown writes them: a and c carry releasedAt, b and c
// alternateOwnerAttrs. Ordinal 3 is held by d, with no unknown keys.
const (
	cooldownEtcd = `{"cidr":"10.0.0.0/29","affinity":"host:n1","allocations":[0,1,2,3,null,null,null,null],"unallocated":[4,5,6,7],` +
		`"attributes":[{"handle_id":"a","secondary":null,"releasedAt":"2026-01-02T03:04:05Z"},` +
		`{"handle_id":"b","secondary":{"pod":"p"},"alternateOwnerAttrs":{"pod":"q"}},` +
		`{"handle_id":"c","secondary":null,"alternateOwnerAttrs":{"pod":"r"},"releasedAt":"2026-01-02T03:04:06Z"},` +
		`{"handle_id":"d","secondary":null}],` +
		`"sequenceNumber":10,"sequenceNumberForAllocation":{"0":1,"1":2,"2":3,"3":4},"deleted":false}`
	cooldownKDD = `{"cidr":"10.0.0.0/29","affinity":"host:n1","allocations":[0,1,2,3,null,null,null,null],"unallocated":[4,5,6,7],` +
		`"attributes":[{"handle_id":"a","releasedAt":"2026-01-02T03:04:05Z"},` +
		`{"handle_id":"b","secondary":{"pod":"p"},"alternateOwnerAttrs":{"pod":"q"}},` +
		`{"handle_id":"c","alternateOwnerAttrs":{"pod":"r"},"releasedAt":"2026-01-02T03:04:06Z"},` +
		`{"handle_id":"d"}],` +
		`"sequenceNumber":10,"sequenceNumberForAllocation":{"0":1,"1":2,"2":3,"3":4},"deleted":false,"strictAffinity":false}`
)

// rewriteEtcd decodes an etcd block, edits it and encodes it as
// repair writes it back.
func rewriteEtcd(t *testing.T, raw string, edit func(*Block)) []byte {
	t.Helper()
	var b Block
	mustDecode(t, []byte(raw), &b)
	edit(&b)
	out, err := MarshalKeeping([]byte(raw), &b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// rewriteKDD is rewriteEtcd for an IPAMBlock spec, through the etcd model
// as the KDD datastore and the simulator go.
func rewriteKDD(t *testing.T, raw string, edit func(*Block)) []byte {
	t.Helper()
	var s IPAMBlockSpec
	mustDecode(t, []byte(raw), &s)
	b, err := s.Block()
	if err != nil {
		t.Fatal(err)
	}
	edit(b)
	out, err := MarshalSpecKeeping([]byte(raw), NewIPAMBlockSpec(b))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAttributeUnknownKeysTravel(t *testing.T) {
	release := func(ords ...int) func(*Block) {
		return func(b *Block) {
			if err := b.Release(ords...); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name, raw string
		rewrite   func(*testing.T, string, func(*Block)) []byte
		edit      func(*Block)
		// wantAttrs and wantAllocs are the rewritten attributes and
		// allocations, byte for byte.
		wantAttrs, wantAllocs string
	}{
		{"etcd unchanged", cooldownEtcd, rewriteEtcd, func(*Block) {},
			`[{"handle_id":"a","secondary":null,"releasedAt":"2026-01-02T03:04:05Z"},` +
				`{"handle_id":"b","secondary":{"pod":"p"},"alternateOwnerAttrs":{"pod":"q"}},` +
				`{"handle_id":"c","secondary":null,"alternateOwnerAttrs":{"pod":"r"},"releasedAt":"2026-01-02T03:04:06Z"},` +
				`{"handle_id":"d","secondary":null}]`,
			`[0,1,2,3,null,null,null,null]`},
		{"etcd release renumbers", cooldownEtcd, rewriteEtcd, release(0),
			`[{"handle_id":"b","secondary":{"pod":"p"},"alternateOwnerAttrs":{"pod":"q"}},` +
				`{"handle_id":"c","secondary":null,"alternateOwnerAttrs":{"pod":"r"},"releasedAt":"2026-01-02T03:04:06Z"},` +
				`{"handle_id":"d","secondary":null}]`,
			`[null,0,1,2,null,null,null,null]`},
		{"etcd release in the middle", cooldownEtcd, rewriteEtcd, release(1),
			`[{"handle_id":"a","secondary":null,"releasedAt":"2026-01-02T03:04:05Z"},` +
				`{"handle_id":"c","secondary":null,"alternateOwnerAttrs":{"pod":"r"},"releasedAt":"2026-01-02T03:04:06Z"},` +
				`{"handle_id":"d","secondary":null}]`,
			`[0,null,1,2,null,null,null,null]`},
		{"etcd new allocation does not share an attribute with unknown keys", cooldownEtcd, rewriteEtcd,
			func(b *Block) {
				mustAlloc(t, b, 1, "b", map[string]string{"pod": "p"}) // ordinal 4: like b, but no alternateOwnerAttrs
				mustAlloc(t, b, 1, "d", nil)                           // ordinal 5: shares d's plain attribute
			},
			`[{"handle_id":"a","secondary":null,"releasedAt":"2026-01-02T03:04:05Z"},` +
				`{"handle_id":"b","secondary":{"pod":"p"},"alternateOwnerAttrs":{"pod":"q"}},` +
				`{"handle_id":"c","secondary":null,"alternateOwnerAttrs":{"pod":"r"},"releasedAt":"2026-01-02T03:04:06Z"},` +
				`{"handle_id":"d","secondary":null},` +
				`{"handle_id":"b","secondary":{"pod":"p"}}]`,
			`[0,1,2,3,4,3,null,null]`},
		{"KDD unchanged", cooldownKDD, rewriteKDD, func(*Block) {},
			`[{"handle_id":"a","releasedAt":"2026-01-02T03:04:05Z"},` +
				`{"handle_id":"b","secondary":{"pod":"p"},"alternateOwnerAttrs":{"pod":"q"}},` +
				`{"handle_id":"c","alternateOwnerAttrs":{"pod":"r"},"releasedAt":"2026-01-02T03:04:06Z"},` +
				`{"handle_id":"d"}]`,
			`[0,1,2,3,null,null,null,null]`},
		{"KDD release renumbers", cooldownKDD, rewriteKDD, release(0, 3),
			`[{"handle_id":"b","secondary":{"pod":"p"},"alternateOwnerAttrs":{"pod":"q"}},` +
				`{"handle_id":"c","alternateOwnerAttrs":{"pod":"r"},"releasedAt":"2026-01-02T03:04:06Z"}]`,
			`[null,0,1,null,null,null,null,null]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := tt.rewrite(t, tt.raw, tt.edit)
			var got map[string]json.RawMessage
			mustDecode(t, out, &got)
			if string(got["attributes"]) != tt.wantAttrs {
				t.Errorf("attributes\n got %s\nwant %s", got["attributes"], tt.wantAttrs)
			}
			if string(got["allocations"]) != tt.wantAllocs {
				t.Errorf("allocations %s, want %s", got["allocations"], tt.wantAllocs)
			}
		})
	}
}

func TestAttributeJSON(t *testing.T) {
	tests := []struct {
		name, in, etcd, kdd string
	}{
		{"known keys only", `{"handle_id":"h","secondary":{"node":"n"}}`,
			`{"handle_id":"h","secondary":{"node":"n"}}`, `{"handle_id":"h","secondary":{"node":"n"}}`},
		{"empty", `{}`, `{"handle_id":null,"secondary":null}`, `{}`},
		{"unknown keys sorted after the known ones", `{"zz":1,"releasedAt":"t","handle_id":"h","aa":[ 1, 2 ]}`,
			`{"handle_id":"h","secondary":null,"aa":[1,2],"releasedAt":"t","zz":1}`, `{"handle_id":"h","aa":[1,2],"releasedAt":"t","zz":1}`},
		{"a known key in another case is known", `{"Handle_ID":"h","x":true}`,
			`{"handle_id":"h","secondary":null,"x":true}`, `{"handle_id":"h","x":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a Attribute
			mustDecode(t, []byte(tt.in), &a)
			if got := mustEncode(t, a); string(got) != tt.etcd {
				t.Errorf("etcd %s, want %s", got, tt.etcd)
			}
			var k KDDAttribute
			mustDecode(t, []byte(tt.in), &k)
			if got := mustEncode(t, k); string(got) != tt.kdd {
				t.Errorf("KDD %s, want %s", got, tt.kdd)
			}
		})
	}
}
