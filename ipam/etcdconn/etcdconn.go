// Package etcdconn connects safe-ipam to an etcd cluster, with client
// certificates when they are set. Its errors name the TLS file at fault
// and the setting that named it: a TLS failure otherwise shows only as an
// etcd that "is not reachable".
package etcdconn

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/connectivity"

	"github.com/safe-ipam/safe-ipam/ipam/etcdtls"
)

// Config says how to reach etcd.
type Config struct {
	Endpoints   []string
	TLS         etcdtls.Files
	DialTimeout time.Duration // how long to wait for the connection
}

// Connect returns a client whose connection is up, so that a store that
// cannot be reached is found before anything changes, without spending a
// request on it. When TLS is set and the connection fails, one TLS dial
// per endpoint finds out why, and the error says so.
func Connect(ctx context.Context, cfg Config) (*clientv3.Client, error) {
	tlsConfig, err := cfg.TLS.Config(time.Now())
	if err != nil {
		return nil, fmt.Errorf("etcd TLS: %w", err)
	}
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		TLS:         tlsConfig,
		// stdout carries the CNI result, and callers report failures themselves.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", cfg.Endpoints, err)
	}
	if err := waitReady(ctx, client, cfg, tlsConfig); err != nil {
		client.Close()
		return nil, err
	}
	return client, nil
}

// waitReady waits for the connection. The first time it fails with TLS
// set, a diagnostic dial asks why; a TLS refusal will not heal by waiting,
// so it is returned at once.
func waitReady(ctx context.Context, client *clientv3.Client, cfg Config, tlsConfig *tls.Config) error {
	limit := cfg.DialTimeout
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < limit {
		limit = time.Until(deadline).Round(time.Millisecond) // the caller's deadline comes first
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	conn := client.ActiveConnection()
	conn.Connect()
	var why error
	diagnosed := tlsConfig == nil
	for {
		state := conn.GetState()
		if state == connectivity.Ready {
			return nil
		}
		if state == connectivity.TransientFailure && !diagnosed {
			diagnosed = true
			var refusal error
			if refusal, why = diagnose(ctx, cfg, tlsConfig); refusal != nil {
				return refusal
			}
		}
		if !conn.WaitForStateChange(ctx, state) {
			err := fmt.Errorf("etcd at %v not reachable within %s (last state %s)", cfg.Endpoints, limit, state)
			if why != nil {
				err = fmt.Errorf("%w: %w", err, why)
			}
			return err
		}
	}
}
