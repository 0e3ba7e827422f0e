//go:build !floorfile

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdRecords does per call the etcd work of ipam/store/etcdstore: one
// dial, then one Txn before the delegate and one after, each a compare
// and a write (one raft commit), as its Swap, Commit and MarkReleasing
// do: ADD creates the pending record if neither it nor a quarantine
// exists, then commits it and claims the address index entries; DEL marks
// the record releasing, reading its holder entries, then deletes it with
// its index entries.
type etcdRecords struct {
	cli     *clientv3.Client
	key, qk string
	prefix  string
	att     attachment
	rev     int64
	ips     []string
}

const etcdTimeout = 10 * time.Second

// openEtcd is the floor's etcd store; builds with -tags floorfile have none.
func openEtcd(endpoints []string, prefix string, att attachment) (records, error) {
	return dialEtcd(endpoints, prefix, att)
}

func dialEtcd(endpoints []string, prefix string, att attachment) (*etcdRecords, error) {
	// As ipam/etcdconn does: no logger (stdout carries the result).
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: etcdTimeout, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	name := att.network + "/" + att.containerID + ":" + att.ifName
	return &etcdRecords{cli: cli, key: prefix + "/floor/records/" + name, qk: prefix + "/floor/quarantined/" + name, prefix: prefix, att: att}, nil
}

func (e *etcdRecords) indexKey(ip string) string { return e.prefix + "/floor/index/" + ip }

func (e *etcdRecords) before(verb string) error {
	ctx, cancel := context.WithTimeout(context.Background(), etcdTimeout)
	defer cancel()
	if verb == "ADD" {
		resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(e.key), "=", 0), clientv3.Compare(clientv3.CreateRevision(e.qk), "=", 0)).
			Then(clientv3.OpPut(e.key, string(record(e.att, "pending", nil, nil)))).
			Else(clientv3.OpGet(e.key), clientv3.OpGet(e.qk, clientv3.WithCountOnly())).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return fmt.Errorf("record %s exists", e.key)
		}
		e.rev = resp.Header.Revision
		return nil
	}
	resp, err := e.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(e.key), ">", 0)).
		Then(clientv3.OpPut(e.key, string(record(e.att, "releasing", nil, nil)), clientv3.WithPrevKV()), clientv3.OpGet(e.key+"/holds/", clientv3.WithPrefix())).
		Else(clientv3.OpGet(e.qk, clientv3.WithCountOnly())).Commit()
	if err != nil || !resp.Succeeded {
		return err // no record: nothing to mark
	}
	e.rev = resp.Header.Revision
	if prev := resp.Responses[0].GetResponsePut().GetPrevKv(); prev != nil {
		var r struct {
			IPs []string `json:"ips"`
		}
		if err := json.Unmarshal(prev.Value, &r); err != nil {
			return err
		}
		e.ips = r.IPs
	}
	return nil
}

func (e *etcdRecords) after(verb string, result []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), etcdTimeout)
	defer cancel()
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(e.key), "=", e.rev)}
	var ops []clientv3.Op
	if verb == "DEL" {
		if e.rev == 0 {
			return nil // nothing was marked
		}
		ops = append(ops, clientv3.OpDelete(e.key), clientv3.OpDelete(e.key+"/holds/", clientv3.WithPrefix()))
		for _, ip := range e.ips {
			ik := e.indexKey(ip)
			ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(ik), "=", e.key)}, []clientv3.Op{clientv3.OpDelete(ik)}, nil))
		}
	} else {
		ips, err := addresses(result)
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(e.key, string(record(e.att, "committed", ips, result))))
		for _, ip := range ips {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(e.indexKey(ip)), "=", 0))
			ops = append(ops, clientv3.OpPut(e.indexKey(ip), e.key))
		}
	}
	resp, err := e.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("%s of %s: the record or an address index entry changed", verb, e.key)
	}
	return nil
}
