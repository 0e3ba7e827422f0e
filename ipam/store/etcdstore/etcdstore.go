// Package etcdstore keeps records in etcd under
// <prefix>/attachments/<network>/<containerID>/<ifname>. Every write is one
// Txn that compares the key's revision with what the caller last saw.
package etcdstore

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// Config says how to reach etcd.
type Config struct {
	Endpoints                 []string
	Prefix                    string
	CertFile, KeyFile, CAFile string
	DialTimeout               time.Duration
}

// Store is the etcd store.
type Store struct {
	client  *clientv3.Client
	prefix  string
	timeout time.Duration
}

var _ store.Store = (*Store)(nil)

// Open connects to etcd and waits until the connection is up, so an
// unreachable store is found before anything is changed, without spending
// a request on it.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	tlsConfig, err := clientTLS(cfg)
	if err != nil {
		return nil, err
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		TLS:         tlsConfig,
		Logger:      quietLogger(),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: etcd client for %v: %v", store.ErrUnavailable, cfg.Endpoints, err)
	}
	s := &Store{client: client, prefix: cfg.Prefix, timeout: cfg.DialTimeout}
	if err := s.waitConnected(ctx); err != nil {
		client.Close()
		return nil, err
	}
	return s, nil
}

// NewWithClient wraps an existing client (tests, admin commands).
func NewWithClient(client *clientv3.Client, prefix string, timeout time.Duration) *Store {
	return &Store{client: client, prefix: prefix, timeout: timeout}
}

func clientTLS(cfg Config) (*tls.Config, error) {
	if cfg.CertFile == "" && cfg.CAFile == "" {
		return nil, nil
	}
	info := transport.TLSInfo{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, TrustedCAFile: cfg.CAFile}
	tlsConfig, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("%w: etcd TLS files: %v", store.ErrUnavailable, err)
	}
	return tlsConfig, nil
}

func (s *Store) waitConnected(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	conn := s.client.ActiveConnection()
	conn.Connect()
	for {
		state := conn.GetState()
		if state == connectivity.Ready {
			return nil
		}
		if !conn.WaitForStateChange(ctx, state) {
			return fmt.Errorf("%w: etcd at %v not reachable within %s (last state %s)",
				store.ErrUnavailable, s.client.Endpoints(), s.timeout, state)
		}
	}
}

// Prefix returns the key prefix of a network's records, ending in "/".
func Prefix(prefix, network string) string {
	return prefix + "/attachments/" + network + "/"
}

func (s *Store) key(att record.Attachment) string {
	return Prefix(s.prefix, att.Network) + att.ContainerID + "/" + att.IfName
}

// Swap implements store.Store in one Txn.
func (s *Store) Swap(ctx context.Context, att record.Attachment, prev, next *record.Record) (*record.Record, error) {
	if err := att.Validate(); err != nil {
		return nil, err
	}
	key := s.key(att)
	cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	if prev != nil {
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", prev.Revision)
	}
	op := clientv3.OpDelete(key)
	var out *record.Record
	if next != nil {
		copied := *next
		copied.Attachment = att
		data, err := json.Marshal(&copied)
		if err != nil {
			return nil, fmt.Errorf("encoding record %s: %w", att, err)
		}
		op, out = clientv3.OpPut(key, string(data)), &copied
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Txn(ctx).If(cmp).Then(op).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, fmt.Errorf("%w: swapping record %s: %v", store.ErrUnavailable, att, err)
	}
	if !resp.Succeeded {
		cur, err := decodeFirst(resp.Responses[0].GetResponseRange().GetKvs())
		if err != nil {
			return nil, err
		}
		return cur, store.ErrConflict
	}
	if out != nil {
		out.Revision = resp.Header.Revision
	}
	return out, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, att record.Attachment) (*record.Record, error) {
	if err := att.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Get(ctx, s.key(att))
	if err != nil {
		return nil, fmt.Errorf("%w: reading record %s: %v", store.ErrUnavailable, att, err)
	}
	return decodeFirst(resp.Kvs)
}

// MarkReleasing implements store.Store in one Txn that writes the marker
// only over an existing record. Without a read it cannot keep the fields.
func (s *Store) MarkReleasing(ctx context.Context, marker *record.Record) (*record.Record, error) {
	att := marker.Attachment
	if err := att.Validate(); err != nil {
		return nil, err
	}
	key := s.key(att)
	marker = store.Releasing(marker, marker.Updated)
	data, err := json.Marshal(marker)
	if err != nil {
		return nil, fmt.Errorf("encoding record %s: %w", att, err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), ">", 0)).
		Then(clientv3.OpPut(key, string(data))).Commit()
	if err != nil {
		return nil, fmt.Errorf("%w: marking record %s: %v", store.ErrUnavailable, att, err)
	}
	if !resp.Succeeded {
		return nil, nil
	}
	marker.Revision = resp.Header.Revision
	return marker, nil
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, network string) ([]*record.Record, error) {
	if err := record.ValidateNetwork(network); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.client.Get(ctx, Prefix(s.prefix, network), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("%w: listing records of %s: %v", store.ErrUnavailable, network, err)
	}
	out := make([]*record.Record, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		rec, err := Decode(kv.Value, kv.ModRevision)
		if err != nil {
			return nil, fmt.Errorf("record %s: %w", kv.Key, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// Ping implements store.Store with a cheap read.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if _, err := s.client.Get(ctx, s.prefix+"/", clientv3.WithCountOnly(), clientv3.WithLimit(1)); err != nil {
		return fmt.Errorf("%w: etcd at %v: %v", store.ErrUnavailable, s.client.Endpoints(), err)
	}
	return nil
}

// Close implements store.Store.
func (s *Store) Close() error { return s.client.Close() }

// Decode reads a stored record value.
func Decode(value []byte, revision int64) (*record.Record, error) {
	var rec record.Record
	if err := json.Unmarshal(value, &rec); err != nil {
		return nil, fmt.Errorf("decoding record: %w", err)
	}
	rec.Revision = revision
	return &rec, nil
}

func decodeFirst(kvs []*mvccKV) (*record.Record, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	return Decode(kvs[0].Value, kvs[0].ModRevision)
}
