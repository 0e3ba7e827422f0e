package etcdstore

import (
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"
)

type mvccKV = mvccpb.KeyValue

// quietLogger keeps the etcd client's own logging off stdout and stderr:
// stdout carries the CNI result, and safe-ipam logs failures itself.
func quietLogger() *zap.Logger { return zap.NewNop() }
