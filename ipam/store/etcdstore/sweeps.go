package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/safe-ipam/safe-ipam/ipam/etcdrange"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// The sweeps of every node's records (gc --dead-nodes) elect one process
// per network with etcd's own election: every candidate's key is tied to a
// lease of its session, and the oldest key leads. A candidate that finds
// a leader asks again on its next round instead of waiting in the
// election: one small read per round, where a waiting candidate would keep
// a lease and a watch alive on every node.

// leads are the elections this store's client won, by network.
type leads struct {
	mu       sync.Mutex
	sessions map[string]*concurrency.Session
}

// campaignWait bounds a campaign against a candidate that started at the
// same time: the later one gives up and asks again next round.
const campaignWait = 3 * time.Second

// Lead implements store.Sweeps.
func (s *Store) Lead(ctx context.Context, network string, ttl time.Duration) (string, error) {
	s.leads.mu.Lock()
	defer s.leads.mu.Unlock()
	if sess := s.leads.sessions[network]; sess != nil {
		select {
		case <-sess.Done(): // the lease expired or was revoked: campaign again
			delete(s.leads.sessions, network)
		default:
			return s.node, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout+campaignWait)
	defer cancel()
	pfx := leaderPrefix(s.prefix, network)
	resp, err := s.client.Get(ctx, pfx, clientv3.WithFirstCreate()...)
	if err != nil {
		return "", fmt.Errorf("%w: reading who sweeps %s: %v", store.ErrUnavailable, network, err)
	}
	if len(resp.Kvs) > 0 {
		return string(resp.Kvs[0].Value), nil
	}
	sess, err := concurrency.NewSession(s.client, concurrency.WithTTL(max(int(ttl.Seconds()), 5)), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return "", fmt.Errorf("%w: a lease to sweep %s: %v", store.ErrUnavailable, network, err)
	}
	wait, stop := context.WithTimeout(ctx, campaignWait)
	defer stop()
	if err := concurrency.NewElection(sess, pfx).Campaign(wait, s.node); err != nil {
		sess.Close()
		if errors.Is(wait.Err(), context.DeadlineExceeded) {
			return "another candidate", nil
		}
		return "", fmt.Errorf("%w: campaigning to sweep %s: %v", store.ErrUnavailable, network, err)
	}
	if s.leads.sessions == nil {
		s.leads.sessions = map[string]*concurrency.Session{}
	}
	s.leads.sessions[network] = sess
	return s.node, nil
}

// resign gives up every lead, revoking its lease: the next candidate
// need not wait for it to expire.
func (s *Store) resign() {
	s.leads.mu.Lock()
	defer s.leads.mu.Unlock()
	for network, sess := range s.leads.sessions {
		sess.Close()
		delete(s.leads.sessions, network)
	}
}

// RecordCounts implements store.Sweeps: the record keys alone, page by
// page at one revision.
func (s *Store) RecordCounts(ctx context.Context, network string) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	counts := map[string]int{}
	_, err := etcdrange.Prefix(ctx, s.client, RecordPrefix(s.prefix, network), keysPage, 0, func(resp *clientv3.GetResponse) error {
		for _, kv := range resp.Kvs {
			if _, node, ok := parseRecordKey(s.prefix, string(kv.Key)); ok {
				counts[node]++
			}
		}
		return nil
	}, clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("%w: listing the nodes with records of %s: %v", store.ErrUnavailable, network, err)
	}
	return counts, nil
}

// keysPage bounds one page of keys alone: some 100 bytes each.
const keysPage = 10000

// GoneSince implements store.Sweeps.
func (s *Store) GoneSince(ctx context.Context, network string) (map[string]time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	pfx := gonePrefix(s.prefix, network)
	resp, err := s.client.Get(ctx, pfx, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("%w: reading the nodes sweeps of %s found gone: %v", store.ErrUnavailable, network, err)
	}
	out := map[string]time.Time{}
	for _, kv := range resp.Kvs {
		since, err := time.Parse(time.RFC3339, string(kv.Value))
		if err != nil {
			since = time.Now() // an unreadable note counts as a first sighting: it delays, never hastens
		}
		out[string(kv.Key[len(pfx):])] = since
	}
	return out, nil
}

// SetGone implements store.Sweeps.
func (s *Store) SetGone(ctx context.Context, network, node string, since time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	key := gonePrefix(s.prefix, network) + node
	var err error
	if since.IsZero() {
		_, err = s.client.Delete(ctx, key)
	} else {
		_, err = s.client.Put(ctx, key, since.UTC().Format(time.RFC3339))
	}
	if err != nil {
		return fmt.Errorf("%w: noting node %s of %s gone: %v", store.ErrUnavailable, node, network, err)
	}
	return nil
}
