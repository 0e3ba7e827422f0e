package etcdstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/storetest"
)

func TestContract(t *testing.T) {
	server := etcdtest.Start(t)
	n := 0
	storetest.Run(t, func(t *testing.T) store.Store {
		n++ // a fresh prefix per case keeps cases apart on one server
		s, err := Open(context.Background(), Config{Endpoints: []string{server.Endpoint()}, Prefix: "/t" + string(rune('a'+n)), Node: "node1", DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestUnreachableIsUnavailable(t *testing.T) {
	server := etcdtest.Start(t)
	endpoint := server.Endpoint()
	server.Pause()
	_, err := Open(context.Background(), Config{Endpoints: []string{endpoint}, Prefix: "/x", DialTimeout: 300 * time.Millisecond})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("open of a stopped etcd: %v; want ErrUnavailable", err)
	}
}

func TestOutageFailsWritesThenRecovers(t *testing.T) {
	server := etcdtest.Start(t)
	s := openStore(t, server)
	att := record.Attachment{Network: "n", ContainerID: "c", IfName: "eth0"}
	server.Pause()
	if _, err := s.Swap(context.Background(), att, nil, &record.Record{State: record.Pending}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("swap during outage: %v", err)
	}
	if err := server.Resume(); err != nil {
		t.Fatal(err)
	}
	// A client reconnects with backoff; a runtime would retry, so do we.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := s.Swap(context.Background(), att, nil, &record.Record{State: record.Pending})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("swap after outage: %v", err)
		}
	}
}

// A value that does not decode stands in as an ownerless pending record,
// so DEL, ADD and GC can still release and replace it.
func TestDamagedRecord(t *testing.T) {
	server := etcdtest.Start(t)
	s := openStore(t, server)
	att := record.Attachment{Network: "n", ContainerID: "c", IfName: "eth0"}
	if _, err := server.Client().Put(context.Background(), Key("/x", "node1", att), "{not json"); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List(context.Background(), "n")
	if err != nil || len(recs) != 1 || recs[0].Attachment != att || recs[0].State != record.Pending || recs[0].Owner != nil {
		t.Fatalf("list = %+v, %v", recs, err)
	}
	if _, err := s.Swap(context.Background(), att, recs[0], nil); err != nil {
		t.Fatalf("replacing the damaged record: %v", err)
	}
}

// openStore opens a store on server for node1, closed with the test.
func openStore(t *testing.T, server *etcdtest.Server) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{Endpoints: []string{server.Endpoint()}, Prefix: "/x", Node: "node1", DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
