package config

import "github.com/safe-ipam/safe-ipam/ipam/etcdtls"

// The settings that name etcd TLS files: Calico's top-level keys, and
// ipam.store's. An error about a file names its setting, so these are the
// one place their names are spelled.
var (
	calicoTLSKeys = tlsKeys{cert: "etcd_cert_file", key: "etcd_key_file", ca: "etcd_ca_cert_file"}
	storeTLSKeys  = tlsKeys{cert: "ipam.store.certFile", key: "ipam.store.keyFile", ca: "ipam.store.caFile"}
)

type tlsKeys struct{ cert, key, ca string }

func (k tlsKeys) files(cert, key, ca, in string) etcdtls.Files {
	if in != "" {
		in = " in " + in
	}
	return etcdtls.Files{
		Cert: etcdtls.File{Path: cert, Setting: k.cert + in},
		Key:  etcdtls.File{Path: key, Setting: k.key + in},
		CA:   etcdtls.File{Path: ca, Setting: k.ca + in},
	}
}

// EtcdTLS are Calico's etcd TLS files, each named by its key; in, when
// not "", is the file the keys were read from.
func (c CalicoSettings) EtcdTLS(in string) etcdtls.Files {
	return calicoTLSKeys.files(c.EtcdCertFile, c.EtcdKeyFile, c.EtcdCACertFile, in)
}

// StoreTLS are the record store's TLS files, named by the settings they
// came from: ipam.store's keys when the config has a store, else Calico's.
func (c *Config) StoreTLS(in string) etcdtls.Files {
	keys := calicoTLSKeys
	if c.StoreSet {
		keys = storeTLSKeys
	}
	f := keys.files(c.Store.CertFile, c.Store.KeyFile, c.Store.CAFile, in)
	if c.followedCertKey {
		f.Cert.Setting, f.Key.Setting = calicoTLSKeys.cert+in, calicoTLSKeys.key+in
	}
	if c.followedCA {
		f.CA.Setting = calicoTLSKeys.ca + in
	}
	return f
}

// CalicoTLSKey is the config key of Calico's etcd cert ("cert"), key
// ("key") or CA ("ca") file, for commands that name where a value came
// from.
func CalicoTLSKey(file string) string {
	return map[string]string{"cert": calicoTLSKeys.cert, "key": calicoTLSKeys.key, "ca": calicoTLSKeys.ca}[file]
}
