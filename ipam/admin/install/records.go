package install

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/bounded"
	"github.com/safe-ipam/safe-ipam/ipam/cachedir"
	"github.com/safe-ipam/safe-ipam/ipam/cni/backends"
	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/logging"
	"github.com/safe-ipam/safe-ipam/ipam/rulebook"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/opener"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Once uninstalled, no DEL or GC passes through safe-ipam any more, so its
// records on the node can only go stale, and a stale record fences its
// addresses for ever if safe-ipam is installed again. Uninstall therefore
// forgets this node's records, with their address index entries and
// quarantines, and leaves the records' own allocations as they are: their
// pods run, and Calico's DEL frees them. A quarantined allocation holds
// the address of a holder that runs (its record is committed: nothing
// here proves the pod gone, so it is taken to run): uninstall re-claims
// it for the holder in Calico (Reclaimer), or keeps it and names the
// holder; only --release-quarantines releases it. The quarantines of a
// holder whose DEL or GC had begun (a releasing record) are released, as
// that DEL would have.

// nodeRecords are the record stores the node's configs route through
// safe-ipam, read before uninstall changes any config (afterwards no
// config names safe-ipam), and those an earlier run left to forget
// (cninode.PendingForgetFile).
type nodeRecords struct {
	configs []*config.Config
	pending []cninode.PendingNetwork
	binDir  string
	// resumed says an earlier run left its file.
	resumed bool
}

// recordsOf finds every network config of the node whose IPAM goes
// through safe-ipam, in either mode.
func recordsOf(n Node) *nodeRecords {
	r := &nodeRecords{binDir: n.BinDir}
	files, err := cninode.ConfFiles(n.ConfDir)
	if err != nil {
		return r // no configs, no records of ours: install and uninstall say why themselves
	}
	settings, _ := bounded.Read(n.settingsPath(), bounded.Small)
	for _, path := range files {
		f, err := cninode.ReadFile(path, n.BinDir)
		if err != nil || f.SafeIPAM == nil || f.Path != path {
			continue // not safe-ipam's, or Calico's read as safe-ipam's own, listed itself
		}
		r.add(f.SafeIPAM, cninode.PendingNetwork{Path: path, Network: f.SafeIPAM.Network, Plugin: f.Plugin, NodeSettings: settings})
	}
	return r
}

func (r *nodeRecords) add(cfg *config.Config, p cninode.PendingNetwork) {
	r.configs, r.pending = append(r.configs, cfg), append(r.pending, p)
}

// resume adds the configs an earlier run could not finish forgetting.
func (r *nodeRecords) resume() error {
	left, err := cninode.ReadPendingForget(r.binDir)
	if err != nil || left == nil {
		return err
	}
	r.resumed = true
	for _, p := range left.Networks {
		if slices.ContainsFunc(r.pending, func(q cninode.PendingNetwork) bool { return q.Path == p.Path }) {
			continue // still routed through safe-ipam: read afresh
		}
		cfg, err := config.ParseWithNodeSettings(p.Plugin, p.NodeSettings, filepath.Join(r.binDir, config.NodeSettingsFile))
		if err != nil {
			return fmt.Errorf("%s, left by an earlier uninstall, for %s: %w", cninode.PendingForgetFile, p.Path, err)
		}
		r.add(cfg, p)
	}
	return nil
}

func (r *nodeRecords) pendingPath() string { return filepath.Join(r.binDir, cninode.PendingForgetFile) }

// keep writes the configs whose records are still to be forgotten, before
// uninstall restores Calico's files.
func (r *nodeRecords) keep() error {
	if len(r.pending) == 0 {
		return nil
	}
	data, err := json.MarshalIndent(cninode.PendingForget{Networks: r.pending}, "", "  ")
	if err != nil {
		return err
	}
	p := &Plan{}
	p.add(writeStep("keep the records to forget in", r.pendingPath(), append(data, '\n'), 0o600))
	return p.Apply()
}

// done removes the file once every record is forgotten (or when nothing
// was uninstalled and no earlier run left it).
func (r *nodeRecords) done() error {
	if err := os.Remove(r.pendingPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// forget removes the node's records of every config (dry run: counts
// them) and says what it did; a store it cannot reach is an error that
// names it, and uninstall can be run again: it finishes from the file
// keep wrote. release releases the quarantines of running holders too.
func (r *nodeRecords) forget(ctx context.Context, dryRun, release bool, formerHosts []string) ([]string, error) {
	var notes []string
	for i, cfg := range r.configs {
		path := r.pending[i].Path
		n, q, err := forgetNetwork(ctx, cfg, path, r.binDir, dryRun, release, formerHosts)
		notes = append(notes, q.notes(cfg.Network, dryRun)...)
		if err != nil {
			return notes, fmt.Errorf("forgetting the records of %s: %w", path, err)
		}
		verb := "forgot"
		if dryRun {
			verb = "would forget"
		}
		notes = append(notes, fmt.Sprintf("%s %d record(s) of network %q on this node, with their address index entries (%s); their pods' allocations are left to Calico",
			verb, n, cfg.Network, cfg.Store.Type))
	}
	return notes, nil
}

// forgetNetwork forgets the node's records of cfg's network, settling
// their quarantines; it returns how many records, and what became of the
// quarantines. A record a call may still be writing (an ADD or DEL begun
// before Calico's files came back) is waited for, up to a call's
// lifetime, and the records are listed again until a listing leaves
// nothing to forget or wait for: that catches what such a call wrote
// after the first listing too.
func forgetNetwork(ctx context.Context, cfg *config.Config, path, binDir string, dryRun, release bool, formerHosts []string) (int, *quarantineFates, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.CallLifetime()+30*time.Second)
	defer cancel()
	log, closeLog := logging.New(cfg.LogFile, cfg.LogLevel, "verb", "uninstall")
	defer closeLog()
	q := &quarantineFates{reclaimer: NewReclaimer(cfg, path)}
	defer q.reclaimer.Close()
	o, err := backends.OpenRelease(ctx, cfg, binDir, path, log)
	if err != nil {
		return 0, q, err
	}
	defer o.Close()
	if !dryRun {
		// Every call begun before Calico's files came back is over before
		// the first listing: none writes its first record after it.
		if err := cachedir.WaitForCalls(ctx, cfg.CacheDir); err != nil {
			return 0, q, err
		}
	}
	_, shared := o.Store.(store.Cluster)
	u := rulebook.Uninstall{Hosts: append([]string{record.ThisHost()}, formerHosts...), Shared: shared, CallLifetime: cfg.CallLifetime()}
	forgotten, said := 0, false
	for {
		all, err := o.Store.List(ctx, cfg.Network)
		if err != nil {
			return forgotten, q, err
		}
		u.Now = time.Now()
		// chaos:uninstall-forgets-another-hosts-records (a mutant breaks what follows)
		list, atWork := q.ownRecords(all, u)
		if dryRun {
			for _, rec := range list {
				q.count(rec, release)
			}
			for _, w := range atWork {
				q.count(w.rec, release)
			}
			return len(list) + len(atWork), q, nil
		}
		changed := false
		for _, rec := range list {
			// Before the record goes, so that a run cut short does it again.
			if err := q.reclaimer.Rekey(ctx, rec); err != nil {
				return forgotten, q, err
			}
			err := o.Guard.Forget(ctx, rec, binDir, q.fate(rec, release))
			if errors.Is(err, store.ErrConflict) {
				changed = true // a DEL or ADD wrote it since the listing: judge it again
				continue
			}
			if err != nil {
				return forgotten, q, err
			}
			forgotten++
		}
		if changed {
			continue
		}
		if len(list) == 0 && len(atWork) == 0 {
			// The records are gone: so go the claims none of them holds
			// now (a release that failed on the way, an ADD killed after
			// its claim), else they would fence their addresses for ever.
			n, err := o.Guard.ForgetOwnClaims(ctx)
			if n > 0 {
				log.Info("forgot claims no record holds", "network", cfg.Network, "claims", n)
			}
			return forgotten, q, err
		}
		if len(atWork) > 0 {
			if !said {
				log.Info("waiting for a call at work", "attachment", atWork[0].rec.Attachment.String(), "why", atWork[0].why)
				said = true
			}
			if err := pauseForCalls(ctx, atWork[0].rec); err != nil {
				return forgotten, q, err
			}
		}
	}
}

// pauseForCalls pauses while the call that wrote rec (the first record
// at work) may still run, before the records are listed again.
func pauseForCalls(ctx context.Context, rec *record.Record) error {
	t := time.NewTimer(callPoll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("waiting for the ADD or DEL of %s to end (a call begun before Calico's files came back): %w", rec.Attachment, ctx.Err())
	case <-t.C:
		return nil
	}
}

// callPoll is how often uninstall looks again at a record a call may
// still be writing: a pod start waits on that call, not on this.
const callPoll = 200 * time.Millisecond

// callAtWork is a record a call may still be writing, and why the
// rulebook waits for it.
type callAtWork struct {
	rec *record.Record
	why string
}

// ownRecords are the records of all that this machine may forget now,
// and those a call may still be writing (rulebook.UninstallForgets);
// those another host wrote are counted (the last listing's).
func (q *quarantineFates) ownRecords(all []*record.Record, u rulebook.Uninstall) (own []*record.Record, atWork []callAtWork) {
	q.keptOthers, q.otherHosts = 0, nil
	for _, rec := range all {
		v := rulebook.UninstallForgets(rec, u)
		switch {
		case v.Release:
			own = append(own, rec)
			continue
		case v.Wait:
			atWork = append(atWork, callAtWork{rec: rec, why: v.Why})
			continue
		}
		q.keptOthers++
		if !slices.Contains(q.otherHosts, rec.Host) {
			q.otherHosts = append(q.otherHosts, rec.Host)
		}
	}
	return own, atWork
}

// quarantineFates counts what uninstall did with the quarantines of one
// network, and the records it left to the other hosts that wrote them.
type quarantineFates struct {
	// keptOthers counts the records other hosts wrote (otherHosts).
	keptOthers int
	otherHosts []string
	reclaimer  *Reclaimer
	// wouldReclaim counts a dry run's quarantines of running holders.
	wouldReclaim int
	// released are quarantines released through the delegate: of holders
	// being deleted, or of running ones with --release-quarantines
	// (atRisk names those).
	released int
	atRisk   []string
}

// fate is what becomes of rec's quarantines: a holder whose DEL or GC had
// begun is not running, and its quarantines are released as that DEL
// would have; any other holder runs (fail closed), and its quarantined
// addresses are re-claimed for it, released only when release says so.
func (q *quarantineFates) fate(rec *record.Record, release bool) guard.QuarantineFate {
	q.count(rec, release)
	if rulebook.UninstallQuarantines(rec, release).Release {
		return nil
	}
	// chaos:uninstall-releases-held-quarantines (a mutant breaks what follows)
	return q.reclaimer.FateOf(rec)
}

func (q *quarantineFates) count(rec *record.Record, release bool) {
	switch {
	case len(rec.Quarantined) == 0:
	case rulebook.UninstallQuarantines(rec, false).Release:
		q.released += len(rec.Quarantined)
	case release:
		q.released += len(rec.Quarantined)
		q.atRisk = append(q.atRisk, podOf(rec))
	default:
		q.wouldReclaim += len(rec.Quarantined)
	}
}

func (q *quarantineFates) notes(network string, dryRun bool) []string {
	var notes []string
	re, rel := "re-claimed", "released"
	if q.keptOthers > 0 {
		leave := "left"
		if dryRun {
			leave = "would leave"
		}
		notes = append(notes, fmt.Sprintf("%s %d record(s) of network %q that host(s) %s wrote under this node's Calico name (a stale nodename?): that machine's safe-ipam fences and releases them; fix the nodename (docs/operations.md). If a host named so is this machine before a host rename, they are its own: uninstall with --former-host NAME forgets them too",
			leave, q.keptOthers, network, strings.Join(q.otherHosts, ", ")))
	}
	if dryRun {
		re, rel = "would re-claim", "would release"
		if q.wouldReclaim > 0 {
			notes = append(notes, fmt.Sprintf("%s %d quarantined allocation(s) of network %q for their holders, which run, in Calico (else keep them and name the holders)", re, q.wouldReclaim, network))
		}
	}
	if n := q.reclaimer.Rekeyed; n > 0 {
		notes = append(notes, fmt.Sprintf("moved the addresses of %d record(s) of network %q under their pods' namespace.podname handles in Calico (delegateHandles: pod): Calico 2.x's DEL of each pod releases them once safe-ipam is gone", n, network))
	}
	if n := q.reclaimer.Reclaimed; n > 0 {
		notes = append(notes, fmt.Sprintf("%s %d quarantined allocation(s) of network %q for their holders: Calico keeps each address under its running holder's own handle again, so Calico alone never hands it out while the holder runs; the fenced pods already run on other addresses", re, n, network))
	}
	if len(q.reclaimer.Kept) > 0 {
		notes = append(notes, fmt.Sprintf("kept %d quarantined allocation(s) of network %q under the fenced sandboxes' handles (could not re-claim them for their holders); kube-controllers frees each once its fenced pod is gone, and the address is then free while its holder uses it: restart the holders at risk first: %s",
			len(q.reclaimer.Kept), network, strings.Join(q.reclaimer.Kept, "; ")))
	}
	if q.released > 0 {
		notes = append(notes, fmt.Sprintf("%s %d quarantined allocation(s) of network %q through calico-ipam", rel, q.released, network))
	}
	if len(q.atRisk) > 0 {
		notes = append(notes, fmt.Sprintf("--release-quarantines: their addresses are free in Calico while these holders use them; restart the holders at risk now: %s", strings.Join(q.atRisk, "; ")))
	}
	return notes
}

// reindex gives the records of every config of the node that goes
// through safe-ipam their address index entries (store.Reindex), and says
// so. It never fails the install it follows: the node is protected, and
// an address a record without an entry holds is fenced once the next
// install, or the start of gc --apply --every, has indexed it (the
// DaemonSet's install and watch mount the file store read-only; its gc
// container does it there).
func reindex(n Node, out, errOut io.Writer) {
	r := recordsOf(n)
	for i, cfg := range r.configs {
		indexed, held, err := opener.Reindex(context.Background(), cfg, r.pending[i].Path)
		if err != nil {
			fmt.Fprintf(errOut, "safe-ipam install: indexing the records of %s: %v; gc --apply --every (the DaemonSet's gc container, which mounts the file store writable) does it at its start, as the next install does\n", r.pending[i].Path, err)
			continue
		}
		fmt.Fprintf(out, "install: indexed the addresses of %d record(s) of network %q on this node\n", indexed, cfg.Network)
		for _, h := range held {
			fmt.Fprintf(errOut, "safe-ipam install: %s is held by two records, %s among them: run safe-ipam audit (duplicate)\n", h.Addr, h.Holder.Attachment)
		}
	}
}
