package admin

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/etcdconn"
)

// Calico is where Calico's data and safe-ipam's records are, and which
// node this is: from the node's CNI config (--conf) the way calico-ipam
// reads it, with explicit flags winning.
type Calico struct {
	Conf                      string
	File                      *config.File // nil without --conf
	Endpoints                 string
	CertFile, KeyFile, CAFile string
	Network, RecordsPrefix    string
	Node                      string
	// NodeErr is why the node name could not be resolved; a command that
	// needs the node reports it.
	NodeErr error

	cmd *Command
}

// Register adds --conf, the etcd flags, --network, --records-prefix and --node.
func (c *Calico) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Conf, "conf", "", "the node's CNI config or conflist: learn the network, Calico's etcd endpoints and TLS files, the node name and safe-ipam's records prefix from it (flags given explicitly win)")
	fs.StringVar(&c.Endpoints, "etcd-endpoints", "http://127.0.0.1:2379", "comma-separated etcd URLs (Calico's datastore)")
	fs.StringVar(&c.CertFile, "etcd-cert", "", "etcd client certificate")
	fs.StringVar(&c.KeyFile, "etcd-key", "", "etcd client key")
	fs.StringVar(&c.CAFile, "etcd-ca", "", "etcd CA certificate")
	fs.StringVar(&c.Network, "network", "", "only records of this CNI network (default: all); also marks <network>.<id> handles as container-keyed")
	fs.StringVar(&c.RecordsPrefix, "records-prefix", config.DefaultEtcdPrefix, "etcd prefix of safe-ipam's records")
	fs.StringVar(&c.Node, "node", "", `this node's name (default: as Calico names it: --conf's nodename or nodename_file, else `+config.CalicoNodenameFile+`, else the host name)`)
}

// Resolve reads --conf and resolves the node as calico-ipam does: a
// judgment under another name than Calico's would be about the wrong node.
func (c *Calico) Resolve(cmd *Command) error {
	c.cmd = cmd
	var calico config.Calico
	if c.Conf != "" {
		file, err := config.ReadFile(c.Conf)
		if err != nil {
			return err
		}
		if ds := file.Calico.Datastore(); ds != config.DatastoreEtcd {
			return fmt.Errorf("--conf %s: Calico's datastore there is %q; only Calico's etcd can be read", c.Conf, ds)
		}
		c.File, calico = file, file.Calico
		c.fill("etcd-endpoints", &c.Endpoints, file.Calico.EtcdEndpoints)
		c.fill("etcd-cert", &c.CertFile, file.Calico.EtcdCertFile)
		c.fill("etcd-key", &c.KeyFile, file.Calico.EtcdKeyFile)
		c.fill("etcd-ca", &c.CAFile, file.Calico.EtcdCACertFile)
		c.fill("network", &c.Network, file.Network)
		if s := file.SafeIPAM; s != nil && s.Store.Type == config.StoreEtcd {
			c.fill("records-prefix", &c.RecordsPrefix, s.Store.Prefix)
		}
	}
	c.RecordsPrefix = strings.TrimRight(c.RecordsPrefix, "/")
	if !cmd.Set("node") {
		c.Node, c.NodeErr = calico.Node()
	}
	return nil
}

func (c *Calico) fill(name string, dst *string, v string) {
	if !c.cmd.Set(name) {
		*dst = v
	}
}

// Connect connects to Calico's etcd; a TLS fault names the file and the
// flag (or --conf key) that gave it.
func (c *Calico) Connect(ctx context.Context) (*clientv3.Client, error) {
	files := etcdconn.TLSFiles{
		Cert: etcdconn.File{Path: c.CertFile, Setting: c.setting("etcd-cert", "etcd_cert_file")},
		Key:  etcdconn.File{Path: c.KeyFile, Setting: c.setting("etcd-key", "etcd_key_file")},
		CA:   etcdconn.File{Path: c.CAFile, Setting: c.setting("etcd-ca", "etcd_ca_cert_file")},
	}
	return etcdconn.Connect(ctx, etcdconn.Config{Endpoints: strings.Split(c.Endpoints, ","), TLS: files, DialTimeout: 5 * time.Second})
}

// setting names where a value came from: the flag, or the --conf key.
func (c *Calico) setting(flagName, confKey string) string {
	if c.Conf != "" && !c.cmd.Set(flagName) {
		return confKey + " in " + c.Conf
	}
	return "--" + flagName
}
