package calicosim

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"
)

// errConflict means a transaction lost a race: some key it guards changed
// since it was read. The caller re-reads and tries again.
var errConflict = errors.New("etcd transaction lost a race with another writer")

// dialTimeout bounds the wait for etcd's connection.
const dialTimeout = 5 * time.Second

// NewClient connects to the etcd cluster named by the config, with TLS
// when any of the etcd_*_file settings is given. With TLS it waits for
// the connection, so that a TLS fault is reported as one, naming the
// file, instead of as a request that timed out.
func NewClient(c *NetConf) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: dialTimeout}
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
	if cfg.TLS != nil {
		if err := waitTLS(cli, c, cfg.TLS); err != nil {
			cli.Close()
			return nil, err
		}
	}
	return cli, nil
}

// waitTLS waits until the client is connected. The first time the
// connection fails, one TLS dial to each endpoint looks for the reason.
func waitTLS(cli *clientv3.Client, c *NetConf, tlsCfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	conn := cli.ActiveConnection()
	conn.Connect()
	dialed := false
	for {
		state := conn.GetState()
		if state == connectivity.Ready {
			return nil
		}
		if state == connectivity.TransientFailure && !dialed {
			dialed = true
			if err := tlsFault(ctx, c, tlsCfg); err != nil {
				return err
			}
		}
		if !conn.WaitForStateChange(ctx, state) {
			return fmt.Errorf("connecting to etcd %v: not connected within %s (%s)", c.Endpoints(), dialTimeout, state)
		}
	}
}

// tlsFault dials the endpoints and returns the TLS failure, naming the
// files, or nil when the handshake is not what fails.
func tlsFault(ctx context.Context, c *NetConf, tlsCfg *tls.Config) error {
	for _, ep := range c.Endpoints() {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "https" {
			continue
		}
		conf := tlsCfg.Clone()
		conf.ServerName = u.Hostname()
		conn, err := (&tls.Dialer{Config: conf}).DialContext(ctx, "tcp", u.Host)
		if err == nil {
			conn.Close()
			continue
		}
		var unknown x509.UnknownAuthorityError
		if errors.As(err, &unknown) {
			return fmt.Errorf("etcd %s: server certificate not trusted by etcd_ca_cert_file %q: %w", ep, c.EtcdCACertFile, err)
		}
		var cerr *tls.CertificateVerificationError
		if errors.As(err, &cerr) {
			return fmt.Errorf("etcd %s: server certificate refused (etcd_ca_cert_file %q): %w", ep, c.EtcdCACertFile, err)
		}
	}
	return nil
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
