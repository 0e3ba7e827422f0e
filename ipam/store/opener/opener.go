// Package opener opens the record store a plugin config names: the one
// way the CNI binary and every admin command reach safe-ipam's records,
// so that all of them find the same store, with the same settings named
// in their errors.
package opener

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
)

// Access says whether the caller writes.
type Access int

const (
	// ReadWrite is the plugin's and the commands' that change records.
	ReadWrite Access = iota
	// ReadOnly is for commands that only read (audit, doctor): a file
	// store needs no write access and takes no lock.
	ReadOnly
)

// Options are how a caller opens a store beyond the config.
type Options struct {
	Access Access
	// In names the file the config came from, for errors ("" for stdin).
	In string
}

// Open opens the record store cfg names for node's records.
func Open(ctx context.Context, cfg *config.Config, node string, o Options) (store.Store, error) {
	if cfg.Store.Type == config.StoreEtcd {
		return etcdstore.Open(ctx, etcdConfig(cfg, node, o))
	}
	return openFiles(cfg, o)
}

func etcdConfig(cfg *config.Config, node string, o Options) etcdstore.Config {
	s := cfg.Store
	return etcdstore.Config{Endpoints: s.Endpoints, Prefix: s.Prefix, Node: node, TLS: cfg.StoreTLS(o.In), DialTimeout: s.DialTimeout.Std()}
}

func openFiles(cfg *config.Config, o Options) (store.Store, error) {
	if o.Access == ReadOnly {
		return filestore.OpenReadOnly(cfg.Store.Dir)
	}
	return filestore.Open(cfg.Store.Dir)
}

// Pending is a store being opened: Start connects to an etcd store while
// the caller checks the rest of its call (a CNI call's delegate, node and
// version), and Open waits for the connection. A file store is opened by
// Open alone: opening it may create its directory, which a refused call
// must not.
type Pending struct {
	cfg   *config.Config
	o     Options
	conn  chan connection // nil for a file store
	taken bool
}

type connection struct {
	client *clientv3.Client
	err    error
}

// Start starts opening the store cfg names. Open it, or Abandon it.
func Start(ctx context.Context, cfg *config.Config, o Options) *Pending {
	p := &Pending{cfg: cfg, o: o}
	if cfg.Store.Type == config.StoreEtcd {
		p.conn = make(chan connection, 1)
		go func() {
			client, err := etcdstore.Connect(ctx, etcdConfig(cfg, "", o))
			p.conn <- connection{client, err}
		}()
	}
	return p
}

// Open is the store, for node's records, once it is open: as Open opens it.
func (p *Pending) Open(node string) (store.Store, error) {
	if p.conn == nil {
		return openFiles(p.cfg, p.o)
	}
	p.taken = true
	c := <-p.conn
	if c.err != nil {
		return nil, c.err
	}
	s := p.cfg.Store
	return etcdstore.NewWithClient(c.client, s.Prefix, node, s.DialTimeout.Std()), nil
}

// Abandon closes the connection Open did not take, once it is made; it
// does not wait.
func (p *Pending) Abandon() {
	if p.conn == nil || p.taken {
		return
	}
	go func() {
		if c := <-p.conn; c.client != nil {
			c.client.Close()
		}
	}()
}
