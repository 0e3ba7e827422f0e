package snapshot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/cni/invocation"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/opener"
)

// Where says where Calico's data and safe-ipam's records are: plain
// values, as the admin commands resolve them from flags and --conf.
type Where struct {
	Calico datastore.Settings
	// Network is the records' network ("" for all, where the store can
	// list all).
	Network string
	// Node is this node, whose records a file store holds; NodeErr is why
	// it could not be told.
	Node    string
	NodeErr error
	// StoreDir is the node's file store ("" when the records are in etcd).
	StoreDir string
	// RecordsPrefix is the etcd store's prefix in Calico's etcd.
	RecordsPrefix string
	// SafeIPAM is --conf's safe-ipam config, read from the file Conf: with
	// the kubernetes datastore, the etcd store it names holds the records.
	SafeIPAM *config.Config
	Conf     string
	// Writes opens the record store for writing (repair forgets stale
	// records); the audit only reads.
	Writes bool
}

// Session is Calico's datastore and safe-ipam's records, open, and the
// snapshot read from them: what the audit judges and repair writes
// through. Close closes both.
type Session struct {
	Data    datastore.Datastore
	Records Records
	Snap    *Snapshot
	closers []func()
}

// Open opens Calico's datastore and the records where w says, and reads
// them into one snapshot.
func Open(ctx context.Context, w Where) (*Session, error) {
	ds, closeDS, err := datastore.OpenCalico(ctx, w.Calico)
	if err != nil {
		return nil, err
	}
	s := &Session{Data: ds, closers: []func(){closeDS}}
	if s.Records, err = s.openRecords(ctx, w, datastore.EtcdClient(ds)); err == nil {
		s.Snap, err = Load(ctx, ds, s.Records, w.Network)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the records, then Calico's datastore.
func (s *Session) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// openRecords opens where this node's plugin keeps its records: the file
// store, else safe-ipam's etcd store in Calico's etcd (cli), else (with
// the kubernetes datastore) the etcd store --conf's ipam.store names.
func (s *Session) openRecords(ctx context.Context, w Where, cli *clientv3.Client) (Records, error) {
	access := opener.ReadOnly
	if w.Writes {
		access = opener.ReadWrite
	}
	switch {
	case w.StoreDir != "":
		return s.openFileRecords(ctx, w, access)
	case cli != nil:
		return &EtcdRecords{Client: cli, Prefix: w.RecordsPrefix}, nil
	case w.NodeErr != nil:
		return nil, fmt.Errorf("cannot tell this node's name as Calico does (%v); pass --node", w.NodeErr)
	}
	st, err := opener.Open(ctx, w.SafeIPAM, w.Node, opener.Options{Access: access, In: w.Conf})
	if err != nil {
		return nil, fmt.Errorf("--conf %s: record store: %w", w.Conf, err)
	}
	st = s.claimed(w.SafeIPAM, st, w.Node, access)
	s.closers = append(s.closers, func() { _ = st.Close() })
	return &StoreRecords{Store: st, Of: w.Node, Where: fmt.Sprintf("%s store of --conf %s", w.SafeIPAM.Store.Type, w.Conf)}, nil
}

// openFileRecords opens the node's file store. A directory that does not
// exist is an error, not "no records": a wrong path must not read as an
// empty store. Opened to write, under --conf's config of that store, it
// keeps that config's cluster-wide claims as the plugin does (a record
// repair forgets releases its claims).
func (s *Session) openFileRecords(ctx context.Context, w Where, access opener.Access) (Records, error) {
	dir, node := w.StoreDir, w.Node
	if node == "" {
		return nil, fmt.Errorf("--store-dir %s holds one node's records: --node must name that node", dir)
	}
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("safe-ipam's file store: %w", err)
	}
	cfg := &config.Config{Store: config.Store{Type: config.StoreFile, Dir: dir}}
	st, err := opener.Open(ctx, cfg, node, opener.Options{Access: access})
	if err != nil {
		return nil, fmt.Errorf("safe-ipam's file store: %w", err)
	}
	if c := w.SafeIPAM; c != nil && c.Store.Type == config.StoreFile && filepath.Clean(c.Store.Dir) == filepath.Clean(dir) {
		st = s.claimed(c, st, node, access)
	}
	s.closers = append(s.closers, func() { _ = st.Close() })
	return &StoreRecords{Store: st, Of: node, Where: "file store " + dir}, nil
}

// claimed gives st, opened for c, the cluster-wide claims c keeps when it
// is opened to write (invocation.Claimed), so that a record repair
// forgets releases its claims as a DEL's does; the audit only reads.
func (s *Session) claimed(c *config.Config, st store.Store, node string, access opener.Access) store.Store {
	if access != opener.ReadWrite {
		return st
	}
	log, closeLog := logging.New(c.LogFile, c.LogLevel, "verb", "repair")
	s.closers = append(s.closers, closeLog)
	return invocation.Claimed(c, st, node, log, false)
}
