package calico

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ReadJSON reads key into v and returns the key's mod revision, which a
// later Txn compares; 0 means the key does not exist (v is then untouched).
func ReadJSON(ctx context.Context, cli *clientv3.Client, key string, v any) (int64, error) {
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, v); err != nil {
		return 0, fmt.Errorf("decoding %s: %w", key, err)
	}
	return resp.Kvs[0].ModRevision, nil
}
