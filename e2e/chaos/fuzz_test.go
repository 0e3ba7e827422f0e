package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/containernetworking/cni/pkg/utils"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// FuzzRecordNaming feeds network names, container IDs and ifnames to both
// stores' naming of records, through their public API. Whatever CNI
// forbids must be refused without writing anything; whatever it allows
// must round-trip through Swap, Get and List, stay inside the store's
// directory or prefix, and never share a record with another attachment.
// `make test` runs the seeds here and in testdata/fuzz; fuzz with
//
//	go test ./e2e/chaos -run '^$' -fuzz FuzzRecordNaming
func FuzzRecordNaming(f *testing.F) {
	for _, s := range [][3]string{
		{"k8s-pod-network", "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0", "eth0"},
		{"net", "../../etc", "eth0"},
		{"net", "cid", "../x"},
		{"..", "cid", "eth0"},
		{"net", "cid", ".."},
		{"net", "cid", "a:b"},
		{"net", "a:b", "eth0"},
		{"net", "cid", "e th"},
		{"net", "cid", "0123456789abcdef"},
		{"net.with-dots_", "ID.with-dots_-", "eth-0.1_x"},
		{"net", "-cid", "eth0"},
		{"net", "cid", "éth0"},
		{"net", "cid", "\\*?[]"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	srv := etcdtest.Start(f)
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, network, containerID, ifName string) {
		skipUnreachable(t, ifName)
		att := record.Attachment{Network: network, ContainerID: containerID, IfName: ifName}
		base := t.TempDir()
		dir := filepath.Join(base, "a", "b", "store")
		files, err := filestore.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		checkNaming(t, namedStore{
			Store:     files,
			contained: func(t *testing.T) { onlyInside(t, base, []string{"a", "b", "store"}) },
			untouched: func(t *testing.T) { onlyInside(t, base, []string{"a", "b", "store"}); emptyDir(t, dir) },
		}, att)
		cli := srv.Client()
		prefix := fmt.Sprintf("/fuzz/%d", n.Add(1))
		rev := revision(t, cli)
		checkNaming(t, namedStore{
			Store:     etcdstore.NewWithClient(cli, prefix, "node1", 5*time.Second),
			contained: func(t *testing.T) { keysInside(t, cli, rev, etcdstore.RecordPrefix(prefix, network)) },
			untouched: func(t *testing.T) { noKeysSince(t, cli, rev) },
		}, att)
	})
}

// skipUnreachable skips names no runtime can pass.
func skipUnreachable(t *testing.T, ifName string) {
	if strings.ContainsRune(ifName, 0) {
		t.Skip("an environment variable cannot carry NUL, so CNI_IFNAME never holds one")
	}
}

// namedStore is a store with checks that nothing was written outside
// where its records belong, or nothing at all.
type namedStore struct {
	store.Store
	contained, untouched func(t *testing.T)
}

func checkNaming(t *testing.T, s namedStore, att record.Attachment) {
	t.Helper()
	ctx := context.Background()
	rec := &record.Record{Attachment: att, Handle: "h", State: record.Committed, IPs: []string{"10.0.0.1/32"}}
	_, err := s.Swap(ctx, att, nil, rec)
	if !cniAccepts(att) {
		refused(t, s, att, err)
		return
	}
	if err != nil {
		t.Fatalf("%T refused %q, which CNI allows: %v", s.Store, att, err)
	}
	s.contained(t)
	got := roundTrip(t, s, att, 1)
	other := sibling(att)
	if _, err := s.Swap(ctx, other, nil, &record.Record{Attachment: other, Handle: "other", State: record.Pending}); err != nil {
		t.Fatalf("%T refused %q: %v", s.Store, other, err)
	}
	if r := roundTrip(t, s, att, 2); r.Handle != "h" {
		t.Fatalf("%T: %q and %q share a record", s.Store, att, other)
	}
	if _, err := s.Swap(ctx, att, got, nil); err != nil {
		t.Fatalf("%T: deleting %q: %v", s.Store, att, err)
	}
	if r, err := s.Get(ctx, att); err != nil || r != nil {
		t.Fatalf("%T: %q after delete: %v, %v", s.Store, att, r, err)
	}
	s.contained(t)
}

// refused: a name CNI forbids changes nothing and reads nothing.
func refused(t *testing.T, s namedStore, att record.Attachment, swapErr error) {
	t.Helper()
	if swapErr == nil {
		t.Fatalf("%T stored %q, which CNI forbids", s.Store, att)
	}
	if _, err := s.Get(context.Background(), att); err == nil {
		t.Fatalf("%T read %q, which CNI forbids", s.Store, att)
	}
	if utils.ValidateNetworkName(att.Network) != nil {
		if _, err := s.List(context.Background(), att.Network); err == nil {
			t.Fatalf("%T listed network %q, which CNI forbids", s.Store, att.Network)
		}
	}
	s.untouched(t)
}

// roundTrip: Get and List return the record under the same name, among
// want records of its network.
func roundTrip(t *testing.T, s namedStore, att record.Attachment, want int) *record.Record {
	t.Helper()
	got, err := s.Get(context.Background(), att)
	if err != nil || got == nil {
		t.Fatalf("%T: Get %q after Swap: %v, %v", s.Store, att, got, err)
	}
	if got.Attachment != att {
		t.Fatalf("%T: Get %q returned the record of %q", s.Store, att, got.Attachment)
	}
	list, err := s.List(context.Background(), att.Network)
	if err != nil {
		t.Fatalf("%T: List %q: %v", s.Store, att.Network, err)
	}
	if len(list) != want || !slices.ContainsFunc(list, func(r *record.Record) bool { return r.Attachment == att }) {
		t.Fatalf("%T: List %q has %d records, want %d including %q: %v", s.Store, att.Network, len(list), want, att, list)
	}
	return got
}

// sibling is another attachment of the same network, to show two names
// never share a record.
func sibling(att record.Attachment) record.Attachment {
	other := att
	if len(other.IfName) < 15 {
		other.IfName += "x"
	} else {
		other.ContainerID += "x"
	}
	return other
}

// cniAccepts applies CNI's own rules, independently of the stores.
// cniAccepts is CNI's rule for names, plus safe-ipam's own: an ifname
// must be UTF-8, or the record's JSON could not give it back unchanged.
func cniAccepts(att record.Attachment) bool {
	return utils.ValidateNetworkName(att.Network) == nil &&
		utils.ValidateContainerID(att.ContainerID) == nil &&
		utils.ValidateInterfaceName(att.IfName) == nil &&
		utf8.ValidString(att.IfName)
}

// onlyInside fails if anything appeared beside the store directory at
// any of the levels above it: a name that climbed out with "..".
func onlyInside(t *testing.T, base string, path []string) {
	t.Helper()
	dir := base
	for _, want := range path {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name() != want {
			names := make([]string, len(entries))
			for i, e := range entries {
				names[i] = e.Name()
			}
			t.Fatalf("file store wrote outside its directory: %s holds %v", dir, names)
		}
		dir = filepath.Join(dir, want)
	}
}

func emptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) > 0 {
		t.Fatalf("file store wrote %s/%s for a name CNI forbids", dir, entries[0].Name())
	}
}

func revision(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// keysInside fails if any key written since rev lies outside prefix.
func keysInside(t *testing.T, cli *clientv3.Client, rev int64, prefix string) {
	t.Helper()
	for _, key := range keysSince(t, cli, rev) {
		if !strings.HasPrefix(key, prefix) {
			t.Fatalf("etcd store wrote %q, outside %q", key, prefix)
		}
	}
}

// noKeysSince fails if anything was written since rev.
func noKeysSince(t *testing.T, cli *clientv3.Client, rev int64) {
	t.Helper()
	if keys := keysSince(t, cli, rev); len(keys) > 0 {
		t.Fatalf("etcd store wrote %q for a name CNI forbids", keys)
	}
}

// keysSince lists the keys of the whole keyspace written after rev.
func keysSince(t *testing.T, cli *clientv3.Client, rev int64) []string {
	t.Helper()
	resp, err := cli.Get(context.Background(), "\x00", clientv3.WithFromKey(), clientv3.WithMinModRev(rev+1), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		keys[i] = string(kv.Key)
	}
	return keys
}
