package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
func (s *Store) Lead(ctx context.Context, network string, ttl time.Duration, campaign bool) (string, error) {
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
	leader, err := s.leader(ctx, pfx, campaign)
	if err != nil || leader != "" || !campaign {
		return leader, err
	}
	// chaos:leader-lease-in-milliseconds (a mutant breaks what follows)
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

// leader is the candidate under pfx that leads: the oldest key whose lease
// lives ("" when none). A key without a live lease (written by hand, or
// restored without its lease) leads nobody, and would keep every
// campaign waiting behind it for ever: a candidate about to campaign
// (clean) deletes it, unless it changed since it was read.
func (s *Store) leader(ctx context.Context, pfx string, clean bool) (string, error) {
	resp, err := s.client.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return "", fmt.Errorf("%w: reading who sweeps: %v", store.ErrUnavailable, err)
	}
	for _, kv := range resp.Kvs {
		if kv.Lease != 0 {
			ttl, err := s.client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
			if err != nil {
				return "", fmt.Errorf("%w: reading the sweeper's lease: %v", store.ErrUnavailable, err)
			}
			if ttl.TTL >= 0 { // -1: expired or revoked
				return string(kv.Value), nil
			}
		}
		// chaos:leaseless-leader-obeyed (a mutant breaks what follows)
		if !clean {
			continue
		}
		key := string(kv.Key)
		if _, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).Then(clientv3.OpDelete(key)).Commit(); err != nil {
			return "", fmt.Errorf("%w: deleting a sweeper's key without a live lease: %v", store.ErrUnavailable, err)
		}
	}
	return "", nil
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

// A sweep's note that a node is gone is two keys: the note, with when
// and the grace, and a key tied to an etcd lease of the grace. The grace
// has passed once etcd expired that lease: the store's clock, not the
// noting machine's, which may run ahead.
type goneNote struct {
	Since time.Time `json:"since"`
	Grace string    `json:"grace"`
}

// Sightings implements store.Sweeps: the notes and the grace keys, at one
// revision.
func (s *Store) Sightings(ctx context.Context, network string) (map[string]store.Sighting, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	notes, waiting := gonePrefix(s.prefix, network), gracePrefix(s.prefix, network)
	resp, err := s.client.Txn(ctx).Then(clientv3.OpGet(notes, clientv3.WithPrefix()), clientv3.OpGet(waiting, clientv3.WithPrefix(), clientv3.WithKeysOnly())).Commit()
	if err != nil {
		return nil, fmt.Errorf("%w: reading the nodes sweeps of %s found gone: %v", store.ErrUnavailable, network, err)
	}
	inGrace := map[string]bool{}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		inGrace[string(kv.Key[len(waiting):])] = true
	}
	out := map[string]store.Sighting{}
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		var n goneNote
		var grace time.Duration
		err := json.Unmarshal(kv.Value, &n)
		if err == nil {
			grace, err = time.ParseDuration(n.Grace)
		}
		node := string(kv.Key[len(notes):])
		if err != nil {
			// An older release's note (its writer's wall clock), or an
			// unreadable one: not a sighting. The next sweep notes the node
			// again, on the store's clock (it delays, never hastens), or
			// forgets the note.
			out[node] = store.Sighting{Legacy: true}
			continue
		}
		out[node] = store.Sighting{Since: n.Since, Grace: grace, Passed: !inGrace[node]}
	}
	return out, nil
}

// NoteGone implements store.Sweeps.
func (s *Store) NoteGone(ctx context.Context, network, node string, grace time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	note, err := json.Marshal(goneNote{Since: time.Now().UTC(), Grace: grace.String()})
	if err != nil {
		return err
	}
	ops := []clientv3.Op{clientv3.OpPut(gonePrefix(s.prefix, network)+node, string(note))}
	if grace > 0 {
		lease, err := s.client.Grant(ctx, int64(math.Ceil(grace.Seconds())))
		if err != nil {
			return fmt.Errorf("%w: a lease for node %s's grace: %v", store.ErrUnavailable, node, err)
		}
		ops = append(ops, clientv3.OpPut(gracePrefix(s.prefix, network)+node, "", clientv3.WithLease(lease.ID)))
	}
	if _, err := s.client.Txn(ctx).Then(ops...).Commit(); err != nil {
		return fmt.Errorf("%w: noting node %s of %s gone: %v", store.ErrUnavailable, node, network, err)
	}
	return nil
}

// ForgetGone implements store.Sweeps.
func (s *Store) ForgetGone(ctx context.Context, network, node string) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err := s.client.Txn(ctx).Then(clientv3.OpDelete(gonePrefix(s.prefix, network)+node), clientv3.OpDelete(gracePrefix(s.prefix, network)+node)).Commit()
	if err != nil {
		return fmt.Errorf("%w: forgetting that node %s of %s is gone: %v", store.ErrUnavailable, node, network, err)
	}
	return nil
}
