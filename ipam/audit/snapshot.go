// Package audit reads Calico's IPAM data and safe-ipam's records from etcd
// and finds what operators used to hunt for by hand: pod-name handles,
// addresses freed under a live record, addresses held twice, leaks,
// orphan records and inconsistent documents. Repair fixes only what the
// audit proves, with compare-and-swap writes.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
)

// pageSize bounds how many keys one read holds in memory at once.
const pageSize = 2000

// Snapshot is Calico's IPAM data and safe-ipam's records, read at one etcd
// revision.
type Snapshot struct {
	Revision   int64
	Blocks     map[netip.Prefix]*BlockDoc
	Handles    map[string]*HandleDoc
	Affinities []AffinityDoc
	Records    []*record.Record
}

// BlockDoc is a block with the mod revision it was read at.
type BlockDoc struct {
	Key         string
	ModRevision int64
	Block       *calico.Block
}

// HandleDoc is a handle document with its mod revision.
type HandleDoc struct {
	Key         string
	ModRevision int64
	Handle      *calico.Handle
}

// AffinityDoc is a host affinity.
type AffinityDoc struct {
	Key  string
	Node string
	CIDR netip.Prefix
}

// Load reads everything under Calico's IPAM prefix and the records of
// network ("" for all) under recordsPrefix, at one revision.
func Load(ctx context.Context, cli *clientv3.Client, recordsPrefix, network string) (*Snapshot, error) {
	s := &Snapshot{Blocks: map[netip.Prefix]*BlockDoc{}, Handles: map[string]*HandleDoc{}}
	if err := scan(ctx, cli, calico.IPAMPrefix, &s.Revision, s.addCalico); err != nil {
		return nil, fmt.Errorf("reading Calico IPAM data: %w", err)
	}
	prefix := recordsPrefix + "/attachments/"
	if network != "" {
		prefix = etcdstore.Prefix(recordsPrefix, network)
	}
	if err := scan(ctx, cli, prefix, &s.Revision, s.addRecord); err != nil {
		return nil, fmt.Errorf("reading safe-ipam records: %w", err)
	}
	return s, nil
}

// scan pages through a prefix at one revision (the first page's, shared
// by later scans) so the snapshot is consistent.
func scan(ctx context.Context, cli *clientv3.Client, prefix string, rev *int64, add func(key string, value []byte, modRev int64) error) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(pageSize)}
		if *rev != 0 {
			opts = append(opts, clientv3.WithRev(*rev))
		}
		resp, err := cli.Get(ctx, from, opts...)
		if err != nil {
			return err
		}
		if *rev == 0 {
			*rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := add(string(kv.Key), kv.Value, kv.ModRevision); err != nil {
				return fmt.Errorf("%s: %w", kv.Key, err)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func (s *Snapshot) addCalico(key string, value []byte, modRev int64) error {
	switch {
	case strings.HasPrefix(key, calico.BlockPrefix):
		var b calico.Block
		if err := json.Unmarshal(value, &b); err != nil {
			return err
		}
		s.Blocks[b.CIDR] = &BlockDoc{Key: key, ModRevision: modRev, Block: &b}
	case strings.HasPrefix(key, calico.HandlePrefix):
		id, err := calico.ParseHandleKey(key)
		if err != nil {
			return err
		}
		var h calico.Handle
		if err := json.Unmarshal(value, &h); err != nil {
			return err
		}
		s.Handles[id] = &HandleDoc{Key: key, ModRevision: modRev, Handle: &h}
	case strings.HasPrefix(key, calico.HostPrefix):
		node, cidr, err := calico.ParseAffinityKey(key)
		if err != nil {
			return err
		}
		s.Affinities = append(s.Affinities, AffinityDoc{Key: key, Node: node, CIDR: cidr})
	}
	return nil
}

func (s *Snapshot) addRecord(key string, value []byte, modRev int64) error {
	rec, err := etcdstore.Decode(value, modRev)
	if err != nil {
		return err
	}
	s.Records = append(s.Records, rec)
	return nil
}
