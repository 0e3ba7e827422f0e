package calicosim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// errConflict means a transaction lost a race: some key it guards changed
// since it was read. The caller re-reads and tries again.
var errConflict = errors.New("etcd transaction lost a race with another writer")

// NewClient connects to the etcd cluster named by the config, with TLS
// when any of the etcd_*_file settings is given.
func NewClient(c *NetConf) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second}
	if c.EtcdCertFile != "" || c.EtcdKeyFile != "" || c.EtcdCACertFile != "" {
		tlsInfo := transport.TLSInfo{CertFile: c.EtcdCertFile, KeyFile: c.EtcdKeyFile, TrustedCAFile: c.EtcdCACertFile}
		tlsCfg, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd TLS config: %w", err)
		}
		cfg.TLS = tlsCfg
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd %v: %w", cfg.Endpoints, err)
	}
	return cli, nil
}

// unchanged guards a key read at revision rev; rev 0 means "still absent".
func unchanged(key string, rev int64) clientv3.Cmp {
	if rev == 0 {
		return clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(key), "=", rev)
}

func putJSON(key string, v any) (clientv3.Op, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return clientv3.Op{}, fmt.Errorf("encoding %s: %w", key, err)
	}
	return clientv3.OpPut(key, string(data)), nil
}

// txn is one compare-and-swap transaction under construction.
type txn struct {
	cmps []clientv3.Cmp
	ops  []clientv3.Op
	err  error
}

func (t *txn) guard(key string, rev int64) { t.cmps = append(t.cmps, unchanged(key, rev)) }

func (t *txn) put(key string, v any) {
	op, err := putJSON(key, v)
	if err != nil && t.err == nil {
		t.err = err
	}
	t.ops = append(t.ops, op)
}

func (t *txn) delete(key string) { t.ops = append(t.ops, clientv3.OpDelete(key)) }

// commit applies the writes if no guarded key changed, else errConflict.
func (t *txn) commit(ctx context.Context, cli *clientv3.Client) error {
	_, err := t.commitRev(ctx, cli)
	return err
}

// commitRev is commit that also returns the revision of the writes, which
// is the ModRevision of every key the transaction put.
func (t *txn) commitRev(ctx context.Context, cli *clientv3.Client) (int64, error) {
	if t.err != nil {
		return 0, t.err
	}
	resp, err := cli.Txn(ctx).If(t.cmps...).Then(t.ops...).Commit()
	if err != nil {
		return 0, fmt.Errorf("etcd transaction: %w", err)
	}
	if !resp.Succeeded {
		return 0, errConflict
	}
	return resp.Header.Revision, nil
}
