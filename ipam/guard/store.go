package guard

import (
	"context"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// OpenStore opens the record store cfg names on node, as the plugin does,
// for admin commands (adopt, doctor).
func OpenStore(ctx context.Context, cfg *config.Config, node string) (store.Store, error) {
	return openStore(ctx, cfg.Store, settingsOf(cfg), node)
}

// settingsOf names the settings the store's TLS files came from, for
// errors: ipam.store's keys when the config has one, else Calico's.
func settingsOf(cfg *config.Config) tlsSettings {
	if cfg.StoreSet {
		return tlsSettings{cert: "ipam.store.certFile", key: "ipam.store.keyFile", ca: "ipam.store.caFile"}
	}
	return tlsSettings{cert: "etcd_cert_file", key: "etcd_key_file", ca: "etcd_ca_cert_file"}
}
