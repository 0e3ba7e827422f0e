package admin

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/etcdtls"
)

// Datastores is where Calico's data and safe-ipam's records are, and which
// node this is: from the node's CNI config (--conf) the way calico-ipam
// reads it, with explicit flags winning.
//
// One rule for --kubeconfig: it names the API server. With the kubernetes
// datastore that server holds Calico's data (Kubeconfig, else --conf's
// kubernetes.kubeconfig, else $KUBECONFIG), and for audit and repair it
// is also the liveness source unless --live, --cni-cache or
// --cri-endpoint names another. With etcd it is only the pods liveness
// source, as before.
type Datastores struct {
	// NodeConf is --conf, --cni-bin-dir and --node.
	NodeConf
	// Datastore is Calico's: datastore.Etcd or datastore.Kubernetes.
	Datastore                 string
	Endpoints                 string
	CertFile, KeyFile, CAFile string
	// KubeconfigFlag is --kubeconfig as given; Kubeconfig is the API
	// server of the kubernetes datastore, resolved as calico-ipam does.
	KubeconfigFlag, Kubeconfig string
	Network, RecordsPrefix     string
	// StoreDir is the file store the records are in ("" when they are in
	// etcd): --store-dir, --conf's ipam.store, or with the kubernetes
	// datastore the plugin's default.
	StoreDir string
}

// Register adds --conf, --cni-bin-dir and --node (NodeConf), --datastore,
// the etcd flags, --kubeconfig, --network, --records-prefix and
// --store-dir.
func (c *Datastores) Register(fs *flag.FlagSet) {
	c.NodeConf.Register(fs)
	pods, _ := liveness.KindOf("kubeconfig")
	others := liveness.Say(func(k liveness.Kind) bool { return !k.Shared }, liveness.Kind.FlagName, "or")
	fs.StringVar(&c.Datastore, "datastore", "", "Calico's datastore, etcdv3 or kubernetes (default: as calico-ipam infers it from --conf; etcdv3 without --conf)")
	fs.StringVar(&c.KubeconfigFlag, "kubeconfig", "", "kubeconfig file for the Kubernetes API. With the kubernetes datastore: Calico's data (default: --conf's kubernetes.kubeconfig, else $KUBECONFIG) and, for audit and repair, the liveness source unless "+others+" is given. With etcd: the liveness source: "+pods.Help+". Needs deploy/safe-ipam-rbac.yaml's ClusterRole")
	fs.StringVar(&c.StoreDir, "store-dir", "", "safe-ipam's file store (default: --conf's ipam.store; with the kubernetes datastore and no --conf, "+config.DefaultStoreDir+"); it holds this node's records only")
	fs.StringVar(&c.Endpoints, "etcd-endpoints", "http://127.0.0.1:2379", "comma-separated etcd URLs (Calico's datastore)")
	fs.StringVar(&c.CertFile, "etcd-cert", "", "etcd client certificate")
	fs.StringVar(&c.KeyFile, "etcd-key", "", "etcd client key")
	fs.StringVar(&c.CAFile, "etcd-ca", "", "etcd CA certificate")
	fs.StringVar(&c.Network, "network", "", "only records of this CNI network (default: all); also marks <network>.<id> handles as container-keyed")
	fs.StringVar(&c.RecordsPrefix, "records-prefix", config.DefaultEtcdPrefix, "etcd prefix of safe-ipam's records")
}

// Resolve reads --conf and resolves the node as calico-ipam does: a
// judgment under another name than Calico's would be about the wrong node.
func (c *Datastores) Resolve(cmd *Command) error {
	if err := c.NodeConf.Resolve(cmd); err != nil {
		return err
	}
	var calico config.CalicoSettings
	if file := c.File; file != nil {
		calico = file.Calico
		c.fill("datastore", &c.Datastore, file.Calico.Datastore())
		c.fill("etcd-endpoints", &c.Endpoints, file.Calico.EtcdEndpoints)
		c.fill("etcd-cert", &c.CertFile, file.Calico.EtcdCertFile)
		c.fill("etcd-key", &c.KeyFile, file.Calico.EtcdKeyFile)
		c.fill("etcd-ca", &c.CAFile, file.Calico.EtcdCACertFile)
		c.fill("network", &c.Network, file.Network)
		c.fillStore(file.SafeIPAM)
	}
	if c.Datastore == "" {
		c.Datastore = datastore.Etcd
	}
	if err := c.resolveDatastore(calico); err != nil {
		return err
	}
	c.RecordsPrefix = strings.TrimRight(c.RecordsPrefix, "/")
	return nil
}

// fillStore learns where the plugin keeps its records from ipam.store.
func (c *Datastores) fillStore(s *config.Config) {
	switch {
	case s == nil:
	case s.Store.Type == config.StoreEtcd:
		c.fill("records-prefix", &c.RecordsPrefix, s.Store.Prefix)
	case s.Store.Type == config.StoreFile:
		c.fill("store-dir", &c.StoreDir, s.Store.Dir)
	}
}

// resolveDatastore checks --datastore and finds the kubernetes
// datastore's API server as calico-ipam does: kubernetes.kubeconfig, else
// the KUBECONFIG environment variable.
func (c *Datastores) resolveDatastore(calico config.CalicoSettings) error {
	switch c.Datastore {
	case datastore.Etcd:
		return nil
	case datastore.Kubernetes:
	default:
		return fmt.Errorf("--datastore %q: Calico's datastore is %q or %q", c.Datastore, datastore.Etcd, datastore.Kubernetes)
	}
	c.Kubeconfig = c.KubeconfigFlag
	for _, v := range []string{calico.Kubeconfig, os.Getenv("KUBECONFIG")} {
		if c.Kubeconfig == "" {
			c.Kubeconfig = v
		}
	}
	if c.Kubeconfig == "" {
		return errors.New("the kubernetes datastore needs the API server: --kubeconfig, --conf's kubernetes.kubeconfig or KUBECONFIG")
	}
	// The plugin keeps its records in the file store unless ipam.store
	// says etcd; without --conf that is its default directory.
	if c.StoreDir == "" && (c.File == nil || c.File.SafeIPAM == nil) {
		if c.cmd.Set("records-prefix") {
			return errors.New("--records-prefix: with the kubernetes datastore, records in etcd are found through --conf's ipam.store")
		}
		c.StoreDir = config.DefaultStoreDir
	}
	return nil
}

func (c *Datastores) fill(name string, dst *string, v string) {
	if !c.cmd.Set(name) {
		*dst = v
	}
}

// Settings are the resolved ways to reach Calico's datastore, as plain
// values; a TLS fault names the file and the flag (or --conf key) that
// gave it. Package datastore opens it.
func (c *Datastores) Settings() datastore.Settings {
	return datastore.Settings{Type: c.Datastore, Endpoints: strings.Split(c.Endpoints, ","), Kubeconfig: c.Kubeconfig,
		TLS: etcdtls.Files{
			Cert: etcdtls.File{Path: c.CertFile, Setting: c.setting("etcd-cert", config.CalicoTLSKey("cert"))},
			Key:  etcdtls.File{Path: c.KeyFile, Setting: c.setting("etcd-key", config.CalicoTLSKey("key"))},
			CA:   etcdtls.File{Path: c.CAFile, Setting: c.setting("etcd-ca", config.CalicoTLSKey("ca"))},
		}}
}

// Place is where the command runs, as this group resolved it.
func (c *Datastores) Place() Place {
	return Place{Node: c.Node, NodeErr: c.NodeErr, Datastore: c.Datastore, KubeconfigFlag: c.KubeconfigFlag, Kubeconfig: c.Kubeconfig}
}

// Place is the node and Calico's datastore a command runs against: plain
// values the Calico group gives the liveness group.
type Place struct {
	Node    string
	NodeErr error
	// Datastore, KubeconfigFlag and Kubeconfig are as in Calico.
	Datastore, KubeconfigFlag, Kubeconfig string
}

// setting names where a value came from: the flag, or the --conf key.
func (c *Datastores) setting(flagName, confKey string) string {
	if c.Conf != "" && !c.cmd.Set(flagName) {
		return confKey + " in " + c.Conf
	}
	return "--" + flagName
}

// CalicoSettings are the settings calico-ipam reaches its datastore with,
// from its network config c (read from the file at path, which TLS errors
// name).
func CalicoSettings(c config.CalicoSettings, path string) datastore.Settings {
	return datastore.Settings{Type: c.Datastore(), Endpoints: c.Endpoints(), TLS: c.EtcdTLS(path), Kubeconfig: c.Kubeconfig}
}
