// Package doctor tells whether a node is protected: whether each Calico
// network's IPAM goes through safe-ipam, whether safe-ipam's delegate and
// record store answer, and who Calico thinks the node is. It only reads:
// operators run it across nodes, and the watch runs it now and then (the
// readiness probe asks the watch for its verdict: doctor --ready-from).
package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin"
	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/calico/datastore"
	"github.com/safe-ipam/safe-ipam/ipam/calico/etcdread"
	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/etcdtls"
	"github.com/safe-ipam/safe-ipam/ipam/failnote"
	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store/opener"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Report is the node's state.
type Report struct {
	Protected bool   `json:"protected"`
	BinDir    string `json:"binDir"`
	ConfDir   string `json:"confDir"`
	// CalicoIPAM is what <bin>/calico-ipam is: "safe-ipam", "calico"
	// (anything else), or "missing".
	CalicoIPAM string `json:"calicoIPAM"`
	// Build is the version line of the safe-ipam build the runtime runs
	// (<bin>/calico-ipam after a takeover, where on a node whose records
	// are in etcd it is safe-ipam-etcd; else <bin>/safe-ipam, which hands
	// such calls to safe-ipam-etcd beside it): its name and version; ""
	// when there is none, and what stopped it from answering in
	// BuildError.
	Build      string    `json:"build,omitempty"`
	BuildError string    `json:"buildError,omitempty"`
	Networks   []Network `json:"networks"`
	// Installed says that some Calico network's IPAM goes through
	// safe-ipam: a node that is not protected is then broken, not bare.
	Installed bool `json:"installed"`
	// HalfUninstalled lists the networks whose records an uninstall
	// could not finish forgetting (cninode.PendingForgetFile): the next
	// uninstall finishes it.
	HalfUninstalled []string `json:"halfUninstalled,omitempty"`
	// Problems says why the node is not protected.
	Problems []string `json:"problems,omitempty"`
}

// What <bin>/calico-ipam can be.
const (
	BinarySafeIPAM = builds.CNIBinary
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
	// Calico says whether Calico's datastore answers as calico-ipam
	// reaches it from this config.
	Calico *CalicoReport `json:"calico,omitempty"`
	// Claims says whether the records get cluster-wide claims (Calico's
	// Kubernetes datastore, the file store); nil elsewhere.
	Claims    *ClaimsReport `json:"claims,omitempty"`
	Datastore string        `json:"datastore,omitempty"`
	Node      string        `json:"node,omitempty"`
	// Installed says that the IPAM goes through safe-ipam.
	Installed bool `json:"installed"`
	// ShadowedBy is safe-ipam's own config (install --mode=own-conflist)
	// when it sorts first: the runtime reads it, not this one.
	ShadowedBy string `json:"shadowedBy,omitempty"`
	Error      string `json:"error,omitempty"`
	// Failing is the CNI path's note of its last ADD or DEL that failed
	// for a reason of the node's, which the next that succeeds removes.
	Failing *failnote.Note `json:"failing,omitempty"`
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
	// Overdue are the stale records last written more than StaleOverdue
	// ago: gc (the DaemonSet's runs every 5 minutes) is not releasing
	// them, and the node is broken.
	Overdue int `json:"overdue"`
	// Exposure says how the store's etcd is exposed (plain text, no CA
	// file); a warning, not a problem: it works.
	Exposure string `json:"exposure,omitempty"`
	// OtherHosts are the hosts other than this one that wrote records
	// under this node's Calico name: two machines share it (a stale
	// Calico nodename). gc keeps their records; a warning.
	OtherHosts []string `json:"otherHosts,omitempty"`
	Error      string   `json:"error,omitempty"`
}

// CalicoReport says whether Calico's datastore answers calico-ipam, the
// delegate, as it is reached from the network config: it refuses every
// ADD otherwise, whatever safe-ipam's own state.
type CalicoReport struct {
	Answers bool `json:"answers"`
	// Transport names how safe-ipam reaches Calico's datastore (Calico's
	// etcd, or the Kubernetes API), and Exposure how that is exposed
	// (plain text, a certificate not verified); a warning, not a problem.
	Transport string `json:"transport"`
	Exposure  string `json:"exposure,omitempty"`
	// Unreachable says that the datastore did not answer: no verdict on
	// the node, unlike an answer that shows a problem.
	Unreachable bool   `json:"unreachable,omitempty"`
	Error       string `json:"error,omitempty"`
}

// Unanswered says that the record store or Calico's datastore did not
// answer: the check could not judge what they hold.
func (n Network) Unanswered() bool {
	return (n.Store != nil && !n.Store.Answers) || (n.Calico != nil && n.Calico.Unreachable)
}

// Unanswered says whether some network's store or datastore did not
// answer.
func (r *Report) Unanswered() bool {
	return slices.ContainsFunc(r.Networks, Network.Unanswered)
}

// Check looks at the node; live, when not nil, judges which records are
// stale. Its error means the check itself could not run (the conf dir
// cannot be read); anything wrong with the node is in the report.
func Check(ctx context.Context, n cninode.Dirs, live liveness.Source) (*Report, error) {
	return check(ctx, n, live, judge{})
}

// CheckLocal looks at what the node's own files say (the install, the
// configs, the delegate) and asks no store or datastore: what the watch
// checks often, beside a full Check now and then.
func CheckLocal(ctx context.Context, n cninode.Dirs) (*Report, error) {
	return check(ctx, n, nil, judge{local: true})
}

func check(ctx context.Context, n cninode.Dirs, live liveness.Source, j judge) (*Report, error) {
	confs, err := cninode.ReadConfs(n.ConfDir)
	if err != nil {
		return nil, fmt.Errorf("--cni-conf-dir %s: %w", n.ConfDir, err)
	}
	r := &Report{BinDir: n.BinDir, ConfDir: n.ConfDir, CalicoIPAM: binaryKind(n.Bin(cninode.CalicoIPAM))}
	if !j.local { // the watch's frequent checks run no program
		r.Build, r.BuildError = cniBuild(ctx, n, r.CalicoIPAM)
	}
	if live != nil {
		j.view, j.err = live.Read(ctx)
		if j.err == nil {
			j.err = j.view.NeedContainers("doctor")
		}
	}
	shadow := ""
	for _, c := range confs {
		if shadow != "" && c.Err == nil && c.IsCalico() {
			// The runtime reads safe-ipam's own config, the first.
			r.Networks = append(r.Networks, Network{File: c.Path, Network: c.Network, IPAM: "not read: " + filepath.Base(shadow) + " sorts first", Protected: true, ShadowedBy: shadow})
			continue
		}
		r.addConf(ctx, n, c, j)
		if shadow == "" && filepath.Base(c.Path) == cninode.OwnConflist && len(r.Networks) > 0 && r.Networks[len(r.Networks)-1].Installed && c == confs[0] {
			shadow = c.Path
		}
	}
	if len(r.Networks) == 0 {
		r.problem("no network config in %s uses calico-ipam", n.ConfDir)
	}
	r.checkUninstall(n)
	r.Protected = len(r.Problems) == 0
	for _, net := range r.Networks {
		r.Installed = r.Installed || net.Installed
	}
	return r, nil
}

// checkUninstall reports an uninstall that could not forget every record:
// they fence their addresses if safe-ipam is installed again.
func (r *Report) checkUninstall(n cninode.Dirs) {
	left, err := cninode.ReadPendingForget(n.BinDir)
	if err != nil {
		r.problem("half uninstalled: %v; run safe-ipam uninstall again", err)
		return
	}
	if left == nil {
		return
	}
	for _, p := range left.Networks {
		r.HalfUninstalled = append(r.HalfUninstalled, p.Network)
	}
	r.problem("half uninstalled: an uninstall could not forget every record of network(s) %s (%s is left): run safe-ipam uninstall again, and it finishes",
		strings.Join(r.HalfUninstalled, ", "), filepath.Join(n.BinDir, cninode.PendingForgetFile))
}

// cniBuild asks the safe-ipam build the runtime runs for its version
// line, without the CNI versions it speaks.
func cniBuild(ctx context.Context, n cninode.Dirs, calicoIPAM string) (string, string) {
	path := n.Bin(builds.CNIBinary)
	if calicoIPAM == BinarySafeIPAM {
		path = n.Bin(cninode.CalicoIPAM)
	} else if ours, _ := cninode.IsSafeIPAM(path); !ours {
		return "", "" // none, or not safe-ipam's: never run
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "version")
	cmd.WaitDelay = time.Second // a child that keeps stdout open does not hold doctor
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CNI_COMMAND=") })
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Sprintf("%s version: %v", path, err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	line, _, _ = strings.Cut(line, " (CNI ")
	return strings.TrimSpace(line), ""
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
		if name == builds.CNIBinary {
			// Half taken off: worse than not installed, every pod start
			// fails (plugin not found). Broken, and says how to mend it.
			net.Installed = true
			net.Error = fmt.Sprintf("the config names safe-ipam, but %s is %s: every pod start fails; put it back (safe-ipam install --mode=conflist), or give calico-config Calico's config back (deploy/calico-config-conflist.revert.yaml) and restart calico-node", n.Bin(name), kind)
			if filepath.Base(c.Path) == cninode.OwnConflist {
				net.Error = fmt.Sprintf("safe-ipam's own config names safe-ipam, but %s is %s: every pod start fails; put it back (safe-ipam install --mode=own-conflist), or remove %s", n.Bin(name), kind, c.Path)
			}
		}
		return net
	}
	net.Installed = true
	stdin, err := c.PluginConfig(i)
	if err != nil {
		net.Error = err.Error()
		return net
	}
	cfg, err := config.ParseOnNode(stdin, n.BinDir)
	if err != nil {
		net.Error = "safe-ipam refuses the config: " + err.Error()
		return net
	}
	net.IPAM = name + " = safe-ipam -> " + describeDelegate(cfg.Delegate)
	net.Datastore = cfg.Datastore()
	if keys := misspelledCalicoKeys(stdin); len(keys) > 0 {
		net.Error = fmt.Sprintf("Calico reads this config differently than written (so its datastore is %s): %s", net.Datastore, strings.Join(keys, "; "))
		return net
	}
	if node, err := cfg.Node(); err == nil {
		net.Node = node
	} else {
		net.Error = "node name: " + err.Error()
	}
	net.Delegate = checkDelegate(ctx, n, cfg)
	// A warning here, not a problem: the call that failed may be the last
	// of an outage long over. The watch judges it (issue 44, item 1).
	if net.Failing, err = failnote.Read(cfg.CacheDir, cfg.Network); err != nil {
		// Fail closed: a note that cannot be read may say the node fails.
		net.Failing = &failnote.Note{At: time.Now().UTC(), Verb: "a CNI call (its note does not read)", Network: c.Network, Msg: err.Error()}
	}
	if !j.local {
		var recs []*record.Record
		net.Store, recs = checkStore(ctx, cfg, c.Network, net.Node, j)
		if net.Node != "" {
			net.Calico = checkCalico(ctx, cfg, c.Path, net.Node, recs, j.memo)
		}
		net.Claims = j.memo.claimsOf(ctx, cfg)
	}
	switch {
	case net.Error != "":
	case net.Delegate.Error != "":
		net.Error = "delegate: " + net.Delegate.Error
	case j.local:
		net.Protected = true
	case net.Store.Error != "":
		net.Error = "record store: " + net.Store.Error
	case net.Store.Overdue > 0:
		net.Error = fmt.Sprintf("%d stale record(s) older than %s that safe-ipam gc has not released (%s lists no sandbox for them): is the DaemonSet's gc container running?",
			net.Store.Overdue, StaleOverdue, net.Store.StaleBy)
	case net.Calico.Error != "":
		net.Error = net.Calico.Error
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
func checkStore(ctx context.Context, cfg *config.Config, network, node string, j judge) (*StoreReport, []*record.Record) {
	s := cfg.Store
	out := &StoreReport{Type: s.Type, Where: s.Dir}
	if s.Type == config.StoreEtcd {
		out.Where = fmt.Sprint(s.Endpoints, " ", s.Prefix)
		out.Exposure = etcdtls.Exposure(s.Endpoints, cfg.StoreTLS(""))
	} else if _, err := os.Stat(s.Dir); errors.Is(err, os.ErrNotExist) {
		out.Answers = true
		return out, nil
	}
	st, err := opener.Open(ctx, cfg, node, opener.Options{Access: opener.ReadOnly})
	if err != nil {
		out.Error = err.Error()
		return out, nil
	}
	defer st.Close()
	recs, err := st.List(ctx, network)
	if err != nil {
		out.Error = err.Error()
		return out, nil
	}
	out.Answers, out.Records = true, len(recs)
	for _, rec := range recs {
		out.Quarantines += len(rec.Quarantined)
	}
	// Only a store machines share can hold another machine's records: in a
	// file store an older host name is this machine's (a rename).
	here := &rulebook.Listing{Node: node, Host: record.ThisHost()}
	out.OtherHosts = rulebook.OtherHosts(here, cfg.Store.Type == config.StoreEtcd, recs)
	slices.Sort(out.OtherHosts)
	j.stale(out, cfg, node, recs)
	return out, recs
}

// judge is the liveness view doctor judges stale records by, read once
// for every network; a zero judge judges nothing.
type judge struct {
	view *liveness.View
	err  error
	// local: ask no store or datastore (CheckLocal).
	local bool
	// memo, in the watch, keeps what a later full check need not read
	// again (Memo).
	memo *Memo
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
	// doctor judges this node's records on this machine, as gc does.
	listing, shared := j.view.Listing(), cfg.Store.Type == config.StoreEtcd
	listing.Host = record.ThisHost()
	if why := rulebook.TrustListing(listing, node, shared, recs); why != "" {
		out.StaleError = why
		return
	}
	w := rulebook.Witness{Node: node, Shared: shared, Listing: listing, Now: time.Now(), Grace: cfg.GCGracePeriod}
	for _, rec := range recs {
		if w.Judge(rec).Release {
			out.Stale++
			if w.Now.Sub(rec.Updated) > StaleOverdue {
				out.Overdue++
			}
		}
	}
}

// StaleOverdue is how long a stale record may wait for gc before the
// node counts as broken: three of the DaemonSet's gc periods. A younger
// one is the next run's work, not a fault.
const StaleOverdue = 15 * time.Minute

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// checkCalico asks Calico's datastore, reached from cfg as calico-ipam
// reaches it, for this node and for its IPAM data: a datastore that does
// not answer, a node Calico does not know, or (on the Kubernetes
// datastore) no IPAM resources, and calico-ipam fails every ADD.
func checkCalico(ctx context.Context, cfg *config.Config, path, node string, recs []*record.Record, memo *Memo) *CalicoReport {
	out := &CalicoReport{}
	out.Transport, out.Exposure = calicoExposure(cfg.Calico)
	ds, closeDS, err := datastore.OpenCalico(ctx, admin.CalicoSettings(cfg.Calico, path))
	if err != nil {
		out.Error, out.Unreachable = err.Error(), true
		return out
	}
	defer closeDS()
	known, err := ds.NodeExists(ctx, node)
	switch {
	case err != nil:
		out.Error, out.Unreachable = fmt.Sprintf("Calico's datastore (%s): reading Node %s: %v", cfg.Calico.Datastore(), node, err), true
	case !known:
		out.Error = fmt.Sprintf("Calico's datastore (%s) has no Node %q: calico-ipam refuses every ADD on this node", cfg.Calico.Datastore(), node)
	default:
		if _, err := ds.Block(ctx, netip.MustParsePrefix("0.0.0.0/32")); err != nil {
			out.Unreachable = true
			out.Error = fmt.Sprintf("Calico's datastore (%s): reading IPAM blocks: %v", cfg.Calico.Datastore(), err)
			break
		}
		out.Answers = true
		out.Error = handleModeProblem(ctx, ds, cfg, recs, memo)
	}
	return out
}

// calicoExposure names the transport to Calico's datastore and says how
// it is exposed, as the CNI binary warns of it (package lookup).
func calicoExposure(c config.CalicoSettings) (transport, why string) {
	if c.Datastore() == config.DatastoreEtcd {
		return "Calico's etcd", etcdtls.Exposure(c.Endpoints(), c.EtcdTLS(""))
	}
	kube, err := kubeapi.New(c.Kubeconfig, time.Second)
	if err != nil {
		return "the Kubernetes API", err.Error()
	}
	return "the Kubernetes API", kube.Exposure()
}

// modeSample is how many of the node's latest records doctor compares
// with Calico's data: the watch runs doctor on every node, and a wrong
// mode shows in every record, so one.
const modeSample = 1

// handleModeProblem says why the records show delegateHandles "container"
// in front of a calico-ipam that keys ADD by namespace.podname (as
// Calico 2.x does), or "": every DEL then releases nothing, and every
// address leaks. (Pod mode in front of Calico 3.x protects as well, and
// from the records alone looks the same as the right pod mode: no alarm.)
func handleModeProblem(ctx context.Context, ds datastore.Datastore, cfg *config.Config, recs []*record.Record, memo *Memo) string {
	if cfg.DelegateHandles != config.HandlesContainer {
		return ""
	}
	recs = slices.DeleteFunc(slices.Clone(recs), func(r *record.Record) bool {
		return r.State != record.Committed || r.PodName == "" || len(r.IPs) == 0
	})
	slices.SortFunc(recs, func(a, b *record.Record) int { return b.Updated.Compare(a.Updated) })
	recs = recs[:min(len(recs), modeSample)]
	byPodName := 0
	for _, rec := range recs {
		addr, ok := record.ParseAddr(rec.IPs[0])
		if !ok {
			continue
		}
		h, known := memo.handle(rec, addr)
		if !known {
			var err error
			if h, err = allocationHandle(ctx, ds, addr, memo); err != nil {
				continue
			}
			memo.keep(rec, addr, h)
		}
		if h == rec.PodNamespace+"."+rec.PodName {
			byPodName++
		}
	}
	if byPodName == 0 {
		return ""
	}
	return fmt.Sprintf(`delegateHandles is "container", but calico-ipam keyed %d of this node's %d latest records by namespace.podname, as Calico 2.x does: `+
		`safe-ipam's DEL cannot release those handles, so every address leaks. Set delegateHandles to "pod" (safe-ipam install --delegate-handles=pod)`,
		byPodName, len(recs))
}

// allocationHandle is the handle Calico's data holds addr under, "" when
// it is free or in no block.
func allocationHandle(ctx context.Context, ds datastore.Datastore, addr netip.Addr, memo *Memo) (string, error) {
	if cli := datastore.EtcdClient(ds); cli != nil {
		// Every block that may hold addr in one round trip, as the CNI
		// binary reads it.
		attr, ok, err := etcdread.AllocationAttribute(ctx, cli, addr)
		if err != nil || !ok || attr.HandleID == nil {
			return "", err
		}
		return *attr.HandleID, nil
	}
	for _, p := range memo.candidates(addr, calico.BlockCandidates(addr)) {
		b, err := ds.Block(ctx, p)
		if err != nil {
			return "", err
		}
		if b != nil {
			memo.found(addr, p)
			return b.Block.HandleOf(addr)
		}
	}
	return "", nil
}

// calicoKeys are the top-level keys of Calico's network config that say
// how calico-ipam reaches its datastore and names the node.
var calicoKeys = []string{"datastore_type", "etcd_endpoints", "etcd_authority", "etcd_scheme", "etcd_discovery_srv",
	"etcd_cert_file", "etcd_key_file", "etcd_ca_cert_file", "kubernetes", "nodename", "nodename_file", "hostname", "ipam", "log_file_path", "log_level"}

// otherTopKeys are the other top-level keys Calico's plugin and CNI
// itself read: never taken for misspellings.
var otherTopKeys = []string{"cniVersion", "name", "type", "mode", "vxlan_mac_prefix", "vxlan_vni", "subnet", "assign_ipv4", "assign_ipv6",
	"qps", "burst", "args", "mtu", "num_queues", "ipam_lock_file", "nodename_file_optional", "log_file_max_size", "log_file_max_age",
	"log_file_max_count", "policy", "feature_control", "container_settings", "include_default_routes", "dataplane_options", "device_type",
	"readiness_gates", "policy_setup_timeout_seconds", "endpoint_status_dir", "require_mtu_file", "calico_api_group",
	"capabilities", "runtimeConfig", "prevResult", "dns"}

// misspelledCalicoKeys names the top-level keys of a Calico plugin config
// that Calico does not read but that are one or two letters from one it
// does: "etcd_endpoint" makes calico-ipam take the Kubernetes datastore,
// and every ADD fails, while the config looks right.
func misspelledCalicoKeys(conf []byte) []string {
	var top map[string]json.RawMessage
	if json.Unmarshal(conf, &top) != nil {
		return nil
	}
	var out []string
	for key := range top {
		if slices.Contains(calicoKeys, key) || slices.Contains(otherTopKeys, key) {
			continue
		}
		for _, known := range calicoKeys {
			if d := editDistance(key, known); d > 0 && d <= 2 {
				if _, set := top[known]; !set {
					out = append(out, fmt.Sprintf("%q is not a key Calico reads (%q?)", key, known))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
