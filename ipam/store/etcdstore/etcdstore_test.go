package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/etcdtls"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
	"github.com/safe-ipam/safe-ipam/ipam/store/storetest"
)

func TestContract(t *testing.T) {
	runContract(t, etcdtest.Start(t), etcdtls.Files{})
}

// The contract holds over an etcd that requires client certificates, as
// Calico's clusters do.
func TestContractTLS(t *testing.T) {
	server := etcdtest.StartTLS(t)
	runContract(t, server, calicoFiles(server.TLS.CertFile, server.TLS.KeyFile, server.TLS.CAFile))
}

func runContract(t *testing.T, server *etcdtest.Server, files etcdtls.Files) {
	n := 0
	openCluster := func(t *testing.T) store.Cluster {
		n++ // a fresh prefix per case keeps cases apart on one server
		s, err := Open(context.Background(), Config{Endpoints: []string{server.Endpoint()}, Prefix: fmt.Sprintf("/t%d", n), Node: "node1", TLS: files, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	open := func(t *testing.T) store.Store { return openCluster(t) }
	storetest.Run(t, open)
	storetest.RunFencing(t, open)
	storetest.RunCluster(t, openCluster)
}

// calicoFiles names TLS files as Calico's plugin config does.
func calicoFiles(cert, key, ca string) etcdtls.Files {
	return etcdtls.Files{
		Cert: etcdtls.File{Path: cert, Setting: "etcd_cert_file"},
		Key:  etcdtls.File{Path: key, Setting: "etcd_key_file"},
		CA:   etcdtls.File{Path: ca, Setting: "etcd_ca_cert_file"},
	}
}

// A wrong TLS file makes the store unavailable, and the error names the
// file and its setting.
func TestTLSFaultsNameTheFile(t *testing.T) {
	server := etcdtest.StartTLS(t)
	f := server.TLS
	missing := filepath.Join(t.TempDir(), "missing-key.pem")
	for _, tc := range []struct {
		name  string
		files etcdtls.Files
		want  string
	}{
		{"wrong CA", calicoFiles(f.CertFile, f.KeyFile, f.OtherCAFile), "not trusted by CA file " + f.OtherCAFile + " (etcd_ca_cert_file)"},
		{"missing key file", calicoFiles(f.CertFile, missing, f.CAFile), "client key file " + missing + " (etcd_key_file) does not exist"},
		{"expired cert", calicoFiles(f.ExpiredCertFile, f.ExpiredKeyFile, f.CAFile), "client certificate file " + f.ExpiredCertFile + " (etcd_cert_file) expired at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(context.Background(), Config{Endpoints: []string{server.Endpoint()}, Prefix: "/x", Node: "node1", TLS: tc.files, DialTimeout: 5 * time.Second})
			if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("open: %v\nwant ErrUnavailable with %q", err, tc.want)
			}
		})
	}
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
	if _, err := server.Client().Put(context.Background(), RecordKey("/x", "node1", att), "{not json"); err != nil {
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

// One process per network leads the sweeps of every node's records: the
// first candidate; the others name it, until it closes its store (its
// lease is revoked) and the next candidate takes over.
func TestOneProcessLeadsTheSweeps(t *testing.T) {
	server := etcdtest.Start(t)
	open := func(node string) *Store {
		s, err := Open(context.Background(), Config{Endpoints: []string{server.Endpoint()}, Prefix: "/lead", Node: node, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open("node-a"), open("node-b")
	for _, tc := range []struct {
		s    *Store
		want string
	}{{a, "node-a"}, {b, "node-a"}, {a, "node-a"}, {b, "node-a"}} {
		if got, err := tc.s.Lead(context.Background(), "net1", time.Minute, true); err != nil || got != tc.want {
			t.Fatalf("Lead of %s = %q, %v; want %q", tc.s.node, got, err, tc.want)
		}
	}
	if got, err := b.Lead(context.Background(), "net2", time.Minute, true); err != nil || got != "node-b" {
		t.Fatalf("Lead of another network = %q, %v; want node-b", got, err)
	}
	a.Close()
	if got, err := b.Lead(context.Background(), "net1", time.Minute, true); err != nil || got != "node-b" {
		t.Fatalf("Lead once the leader closed = %q, %v; want node-b", got, err)
	}
}
