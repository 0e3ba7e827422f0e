// Package doctor tells whether a node is protected: whether each Calico
// network's IPAM goes through safe-ipam, whether safe-ipam's delegate and
// record store answer, and who Calico thinks the node is. It only reads:
// operators run it across nodes, and a readiness probe runs it often.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/etcdconn"
	"github.com/safe-ipam/safe-ipam/ipam/keep"
	"github.com/safe-ipam/safe-ipam/ipam/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store/opener"

	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/delegate"
)

// Report is the node's state.
type Report struct {
	Protected bool   `json:"protected"`
	BinDir    string `json:"binDir"`
	ConfDir   string `json:"confDir"`
	// CalicoIPAM is what <bin>/calico-ipam is: "safe-ipam", "calico"
	// (anything else), or "missing".
	CalicoIPAM string    `json:"calicoIPAM"`
	Networks   []Network `json:"networks"`
	// Problems says why the node is not protected.
	Problems []string `json:"problems,omitempty"`
}

// What <bin>/calico-ipam can be.
const (
	BinarySafeIPAM = cninode.SafeIPAM
	BinaryCalico   = cninode.CalicoBinary
	BinaryMissing  = "missing"
)

// Network is one Calico plugin of one network config file.
type Network struct {
	File    string `json:"file"`
	Network string `json:"network,omitempty"`
	Plugin  int    `json:"plugin"`
	// IPAM is the chain a runtime's call takes, e.g.
	// "calico-ipam = safe-ipam -> calico as calico-ipam".
	IPAM      string          `json:"ipam,omitempty"`
	Protected bool            `json:"protected"`
	Delegate  *DelegateReport `json:"delegate,omitempty"`
	Store     *StoreReport    `json:"store,omitempty"`
	Datastore string          `json:"datastore,omitempty"`
	Node      string          `json:"node,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// DelegateReport says whether safe-ipam's delegate answers.
type DelegateReport struct {
	Path     string   `json:"path,omitempty"`
	Argv0    string   `json:"argv0,omitempty"`
	Versions []string `json:"versions,omitempty"`
	// Speaks is the CNI version safe-ipam would use with it.
	Speaks string `json:"speaks,omitempty"`
	Error  string `json:"error,omitempty"`
}

// StoreReport says whether the record store answers, and what it holds
// for this network on this node: records, the quarantines tied to them,
// and, when a liveness source was named, the stale records (those gc
// would release: the source does not list them).
type StoreReport struct {
	Type        string `json:"type"`
	Where       string `json:"where"`
	Answers     bool   `json:"answers"`
	Records     int    `json:"records"`
	Quarantines int    `json:"quarantines"`
	// Stale is judged by StaleBy, the liveness source; "" when none was
	// named. StaleError says why the source could not judge.
	Stale      int    `json:"stale"`
	StaleBy    string `json:"staleBy,omitempty"`
	StaleError string `json:"staleError,omitempty"`
	// Exposure says how the store's etcd is exposed (plain text, no CA
	// file); a warning, not a problem: it works.
	Exposure string `json:"exposure,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Check looks at the node; live, when not nil, judges which records are
// stale. Its error means the check itself could not run (the conf dir
// cannot be read); anything wrong with the node is in the report.
func Check(ctx context.Context, n cninode.Dirs, live liveness.Source) (*Report, error) {
	confs, err := cninode.ReadConfs(n.ConfDir)
	if err != nil {
		return nil, fmt.Errorf("--cni-conf-dir %s: %w", n.ConfDir, err)
	}
	r := &Report{BinDir: n.BinDir, ConfDir: n.ConfDir, CalicoIPAM: binaryKind(n.Bin(cninode.CalicoIPAM))}
	j := judge{}
	if live != nil {
		j.view, j.err = live.Read(ctx)
		if j.err == nil {
			j.err = j.view.NeedContainers("doctor")
		}
	}
	for _, c := range confs {
		r.addConf(ctx, n, c, j)
	}
	if len(r.Networks) == 0 {
		r.problem("no network config in %s uses calico-ipam", n.ConfDir)
	}
	r.Protected = len(r.Problems) == 0
	return r, nil
}

func binaryKind(path string) string {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return BinaryMissing
	}
	if ok, _ := cninode.IsSafeIPAM(path); ok {
		return BinarySafeIPAM
	}
	return BinaryCalico
}

func (r *Report) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

func (r *Report) addConf(ctx context.Context, n cninode.Dirs, c *cninode.Conf, j judge) {
	if c.Err != nil {
		r.Networks = append(r.Networks, Network{File: c.Path, Error: c.Err.Error()})
		r.problem("%v", c.Err)
		return
	}
	for i, p := range c.Plugins {
		if !p.UsesCalicoIPAM() && !p.RoutedThroughSafeIPAM() {
			continue
		}
		net := checkPlugin(ctx, n, c, i, j)
		if !net.Protected {
			r.problem("%s (plugin %d): %s", c.Path, i, firstNonEmpty(net.Error, "its IPAM does not go through safe-ipam"))
		}
		r.Networks = append(r.Networks, net)
	}
}

// checkPlugin follows the IPAM of plugin i the way the runtime would.
func checkPlugin(ctx context.Context, n cninode.Dirs, c *cninode.Conf, i int, j judge) Network {
	p := c.Plugins[i]
	net := Network{File: c.Path, Network: c.Network, Plugin: i}
	name := p.IPAMType
	if name == "" {
		name = p.Type
	}
	kind := binaryKind(n.Bin(name))
	if kind != BinarySafeIPAM {
		net.IPAM = name + " (" + kind + ")"
		return net
	}
	stdin, err := c.PluginConfig(i)
	if err != nil {
		net.Error = err.Error()
		return net
	}
	cfg, err := config.Parse(stdin)
	if err != nil {
		net.Error = "safe-ipam refuses the config: " + err.Error()
		return net
	}
	net.IPAM = name + " = safe-ipam -> " + describeDelegate(cfg.Delegate)
	net.Datastore = cfg.Datastore()
	if node, err := cfg.Node(); err == nil {
		net.Node = node
	} else {
		net.Error = "node name: " + err.Error()
	}
	net.Delegate = checkDelegate(ctx, n, cfg)
	net.Store = checkStore(ctx, cfg, c.Network, net.Node, j)
	switch {
	case net.Error != "":
	case net.Delegate.Error != "":
		net.Error = "delegate: " + net.Delegate.Error
	case net.Store.Error != "":
		net.Error = "record store: " + net.Store.Error
	default:
		net.Protected = true
	}
	return net
}

func describeDelegate(d config.Delegate) string {
	if d.File() == d.Type {
		return d.Type
	}
	return d.File() + " as " + d.Type
}

// checkDelegate resolves the delegate as safe-ipam would with CNI_PATH
// the bin dir, without writing the version cache.
func checkDelegate(ctx context.Context, n cninode.Dirs, cfg *config.Config) *DelegateReport {
	d, err := delegate.ResolveTarget(ctx, delegate.TargetOf(cfg.Delegate), n.BinDir, "")
	if err != nil {
		return &DelegateReport{Error: err.Error()}
	}
	out := &DelegateReport{Path: d.Path, Argv0: d.Argv0, Versions: d.Versions}
	version := cfg.CNIVersion
	if version == "" {
		version = "0.1.0"
	}
	if out.Speaks, err = delegate.Negotiate(version, d.Versions); err != nil {
		out.Error = err.Error()
	}
	return out
}

// checkStore asks the record store for this node's records of the
// network. A file store whose directory does not exist yet answers with
// none: doctor creates nothing.
func checkStore(ctx context.Context, cfg *config.Config, network, node string, j judge) *StoreReport {
	s := cfg.Store
	out := &StoreReport{Type: s.Type, Where: s.Dir}
	if s.Type == config.StoreEtcd {
		out.Where = fmt.Sprint(s.Endpoints, " ", s.Prefix)
		out.Exposure = etcdconn.Exposure(s.Endpoints, cfg.StoreTLS(""))
	} else if _, err := os.Stat(s.Dir); errors.Is(err, os.ErrNotExist) {
		out.Answers = true
		return out
	}
	st, err := opener.Open(ctx, cfg, node, opener.Options{Access: opener.ReadOnly})
	if err != nil {
		out.Error = err.Error()
		return out
	}
	defer st.Close()
	recs, err := st.List(ctx, network)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	out.Answers, out.Records = true, len(recs)
	for _, rec := range recs {
		out.Quarantines += len(rec.Quarantined)
	}
	j.stale(out, cfg, node, recs)
	return out
}

// judge is the liveness view doctor judges stale records by, read once
// for every network; a zero judge judges nothing.
type judge struct {
	view *liveness.View
	err  error
}

// stale counts the records gc would release, by gc's rules, with the
// same distrust: a source that speaks for another node, or lists nothing
// while records exist, judges nothing.
func (j judge) stale(out *StoreReport, cfg *config.Config, node string, recs []*record.Record) {
	switch {
	case j.view == nil && j.err == nil:
		return
	case j.err != nil:
		out.StaleError = j.err.Error()
		return
	}
	out.StaleBy = j.view.Source
	switch {
	case !j.view.Covers(node):
		out.StaleError = fmt.Sprintf("%s speaks for node %q, not %q", j.view.Source, j.view.Node, node)
		return
	case len(j.view.Attachments) == 0 && len(recs) > 0:
		out.StaleError = j.view.Source + " lists nothing running while records exist; a wrongly mounted socket or directory looks empty"
		return
	}
	rules := keep.Rules{Listed: j.view.ListsAttachment, Now: time.Now(), Grace: cfg.GCGracePeriod, YoungWritten: true}
	for _, rec := range recs {
		if rules.Why(rec) == "" {
			out.Stale++
		}
	}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
