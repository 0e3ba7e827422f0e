package guard

import (
	"context"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// OpenStore opens the record store cfg names on node, as the plugin does,
// for admin commands that write records (adopt). A TLS fault names the
// setting its file came from: ipam.store's keys when they differ from
// Calico's top-level ones, else Calico's.
func OpenStore(ctx context.Context, cfg *config.Config, node string) (store.Store, error) {
	return openStore(ctx, cfg.Store, settingsOf(cfg), node)
}

func settingsOf(cfg *config.Config) tlsSettings {
	s, c := cfg.Store, cfg.Calico
	if s.CertFile == c.EtcdCertFile && s.KeyFile == c.EtcdKeyFile && s.CAFile == c.EtcdCACertFile {
		return tlsSettings{cert: "etcd_cert_file", key: "etcd_key_file", ca: "etcd_ca_cert_file"}
	}
	return tlsSettings{cert: "ipam.store.certFile", key: "ipam.store.keyFile", ca: "ipam.store.caFile"}
}
