package chaos

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/cni/guard"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
)

// Mutant is a deliberately broken safe-ipam: one textual change to its
// source. The suite must catch every mutant, which shows its checks can
// fail on exactly the mistakes safe-ipam exists to avoid.
type Mutant struct {
	Name string
	// Breaks says what the change breaks.
	Breaks string
	// Old is replaced by New where product code marks it: a comment
	// "// chaos:<Name>" in one file under ipam/ or plugin/, right above
	// Old (within three lines), so that a mutant follows its code through
	// moves and edits around it.
	Old, New string
	// Catchers are the histories that must catch it.
	Catchers func() []Job
	// ByExpectation: a catcher's call not doing what it must (a fenced
	// ADD that succeeds, a sweep that must fail) catches it too. For a
	// rulebook rule whose loss no invariant sees at once: an ADD that
	// settles a dead holder on one sighting is harmless while the node
	// really is dead, and wrong on the day it is not.
	ByExpectation bool
}

// Caught says whether the mutant's catchers caught it, and how.
func (mu Mutant) Caught(reports []*Report) (bool, string) {
	sum := Summarize(reports)
	if sum.Lost+sum.Duplicated+sum.Blocked > 0 {
		return true, fmt.Sprintf("%d lost, %d duplicated, %d blocked", sum.Lost, sum.Duplicated, sum.Blocked)
	}
	for _, r := range reports {
		if mu.ByExpectation && len(r.Failures) > 0 {
			return true, fmt.Sprintf("%s: %s", r.Name, r.Failures[0])
		}
	}
	return false, sum.String()
}

// Mutants lists the deliberately broken builds.
func Mutants() []Mutant {
	return []Mutant{
		{
			Name:   "del-passes-pod-identity",
			Breaks: "DEL reaches calico-ipam with K8S_POD_NAMESPACE and K8S_POD_NAME",
			Old:    "Args: args.WithoutPodIdentity().String(), Path: env.Path}",
			New:    "Args: args.String(), Path: env.Path}",
			Catchers: func() []Job {
				return ScriptJobs(
					func() *Script { return CrashScript(guard.DelReleased, FollowRetry, Legacy, FileStore) },
					func() *Script { return CrashScript(guard.AddDelegated, FollowDel, Legacy, EtcdStore) })
			},
		},
		{
			Name:   "forget-before-release",
			Breaks: "DEL deletes the record before the delegate's DEL, so a crash or outage between them leaves an address no record names",
			Old:    "\tg.at(DelMarked)\n",
			New: "\tif marked != nil {\n" +
				"\t\tif _, err := g.store.Swap(ctx, att, marked, nil); err != nil && !errors.Is(err, store.ErrConflict) {\n" +
				"\t\t\treturn storeError(\"forgetting \"+att.String(), err)\n" +
				"\t\t}\n" +
				"\t}\n" +
				"\tg.at(DelMarked)\n",
			Catchers: func() []Job {
				return ScriptJobs(
					func() *Script { return CrashScript(guard.DelMarked, FollowGC, Modern, FileStore) },
					func() *Script { return CrashScript(guard.DelMarked, FollowGC, Legacy, EtcdStore) })
			},
		},
		{
			Name:   "add-passes-pod-identity",
			Breaks: "ADD reaches a Calico 2.x calico-ipam with pod identity, which then keys by pod name",
			Old:    "cniArgs = args.WithoutPodIdentity().String()",
			New:    "cniArgs = args.String()",
			Catchers: func() []Job {
				return ScriptJobs(func() *Script { return CrashScript(guard.AddCommitted, FollowRetry, Legacy, FileStore) })
			},
		},
		{
			Name:   "gc-ignores-valid-list",
			Breaks: "GC collects attachments the runtime lists as valid",
			Old:    "case l != nil && l.listsAttachment(rec.ContainerID, rec.IfName):",
			New:    "case false && l.listsAttachment(rec.ContainerID, rec.IfName):",
			Catchers: func() []Job {
				return ScriptJobs(func() *Script { return CrashScript(guard.GCForgotten, FollowRetry, Modern, EtcdStore) })
			},
		},
		{
			Name:     "release-on-unknown-commit",
			Breaks:   "an ADD whose commit answer was lost releases the addresses anyway",
			Old:      "if errors.Is(err, store.ErrConflict) || errors.As(err, &cniErr) {",
			New:      "if true || errors.As(err, &cniErr) {",
			Catchers: func() []Job { return ScriptJobs(func() *Script { return AmbiguousCommitScript(Modern) }) },
		},
		{
			Name:   "fencing-disabled",
			Breaks: "ADD commits without the address index, so an address freed behind a live attachment's back goes to a new pod",
			Old:    "_, err = g.store.Commit(ctx, pending, &committed)\n\tvar held",
			New:    "_, err = g.store.Swap(ctx, pending.Attachment, pending, &committed)\n\tvar held",
			Catchers: func() []Job {
				return ScriptJobs(
					func() *Script { return OutsideReleaseScript(Modern, FileStore, OutsideCalicoDel) },
					func() *Script { return OutsideReleaseScript(Legacy, EtcdStore, OutsideIPAMRelease) })
			},
		},
		{
			Name:   "claims-not-made",
			Breaks: "on Calico's Kubernetes datastore a commit claims no address, so another node's ADD given a running pod's address starts with it",
			Old:    "made, err := s.claim(ctx, s.mine(committed))",
			New:    "made, err := []*Claim(nil), error(nil)",
			Catchers: func() []Job {
				return ScriptJobs(func() *Script { return ClaimsOutsideScript(Modern, OutsideCalicoDel) })
			},
		},
		{
			Name:   "claims-another-holder-taken",
			Breaks: "a commit that meets another node's claim on its address takes it for its own: the API server's AlreadyExists is no longer a fence",
			Old:    "case cl.Names(committed):",
			New:    "case cl != nil:",
			Catchers: func() []Job {
				return ScriptJobs(func() *Script { return ClaimsOutsideScript(Legacy, OutsideIPAMRelease) })
			},
		},
		{
			Name:   "claims-kept-on-release",
			Breaks: "a DEL releases a record's addresses in Calico and leaves its claims, which fence them for ever after",
			Old:    "s.releaseOf(ctx, out)",
			New:    "_ = out",
			Catchers: func() []Job {
				return ScriptJobs(func() *Script { return CrashScript(guard.DelReleased, FollowRetry, Modern, ClaimsStore) })
			},
		},
		{
			Name:   "claims-released-by-name",
			Breaks: "a DEL after a node rename releases only claims under the node's new name, leaving its record's, which fence the address for ever after",
			Old:    "if err == nil && cl != nil && cl.MadeFor(rec) {",
			New:    "if err == nil && cl != nil && cl.Names(rec) {",
			Catchers: func() []Job {
				return ScriptJobs(ClaimsRenameScript)
			},
		},
		{
			Name:   "claims-of-unfinished-kept",
			Breaks: "the DEL of an ADD killed between its claims and its commit leaves the claims, which fence an address Calico hands out",
			Old:    "if prior != nil && unfinished(prior) && len(prior.IPs) == 0 {",
			New:    "if false && prior != nil && unfinished(prior) && len(prior.IPs) == 0 {",
			Catchers: func() []Job {
				return ScriptJobs(func() *Script { return CrashScript(guard.Step(claims.Claimed), FollowDel, Modern, ClaimsStore) })
			},
		},
		{
			Name:   "dead-node-fences",
			Breaks: "an ADD given an address a dead node's record holds fences on it, as if the node lived",
			Old:    "\tif v := w.Judge(holder); !v.Release {\n",
			New:    "\tif v := w.Judge(holder); true || !v.Release {\n",
			Catchers: func() []Job {
				return ScriptJobs(func() *Script { return NodeDeathScript(EtcdStore, SettleByAdd) })
			},
		},
		{
			Name:   "dead-node-releases-pod-handle",
			Breaks: "gc --dead-nodes releases a dead node's pod-name handle on the address alone, freeing a new incarnation's",
			Old:    "\tif g.deadNode {\n",
			New:    "\tif g.deadNode {\n\t\town = runtimeDEL\n\t}\n\tif false {\n",
			Catchers: func() []Job {
				return ScriptJobs(ComebackScript)
			},
		},
		{
			Name:   "gc-dead-nodes-keeps",
			Breaks: "gc --dead-nodes takes every node for known and releases nothing",
			Old:    "\tif death.Known {\n",
			New:    "\tif true || death.Known {\n",
			Catchers: func() []Job {
				return ScriptJobs(func() *Script { return NodeDeathScript(EtcdStore, SettleByGC) })
			},
		},
		{
			Name:          "add-settles-on-one-sighting",
			Breaks:        "the ADD settles a dead holder on its own one reading that Calico lacks the node, without the sweep's sighting a grace before (issue 41, item 2.8): the ADD's path drops the rulebook's second sighting",
			Old:           "\td := &rulebook.Death{Known: known}\n",
			New:           "\td := &rulebook.Death{Known: known, Noted: true, Passed: true}\n",
			Catchers:      func() []Job { return ScriptJobs(FoundGoneOnceScript) },
			ByExpectation: true,
		},
		{
			Name:     "sweep-trusts-any-listing",
			Breaks:   "gc --dead-nodes takes an empty or sharply shrunk Nodes listing for the nodes' death (issue 41, item 2.7): the sweep's path drops the rulebook's trust in its evidence",
			Old:      "MaxGoneShare: n.MaxGoneShare}); why != \"\" {",
			New:      "MaxGoneShare: n.MaxGoneShare}); false && why != \"\" {",
			Catchers: func() []Job { return ScriptJobs(NodesLostScript) },
		},
		{
			Name:   "quarantine-keeps-holder-revision",
			Breaks: "a quarantine leaves its holder's revision as it was, so a forget that read the holder before deletes it and strands the quarantine's mark",
			Old:    "\t\t\tclientv3.OpPut(hk, \"\", clientv3.WithIgnoreValue()),\n",
			New:    "",
			Catchers: func() []Job {
				return ScriptJobs(func() *Script { return QuarantineRacesForgetScript(EtcdStore) })
			},
		},
		{
			Name:   "uninstall-releases-held-quarantines",
			Breaks: "uninstall releases the allocations quarantined with running holders, so Calico hands a running pod's address out again",
			Old:    "return q.reclaimer.FateOf(rec)",
			New:    "return nil",
			Catchers: func() []Job {
				return ScriptJobs(
					func() *Script { return UninstallQuarantineScript(FileStore, false) },
					func() *Script { return UninstallQuarantineScript(EtcdStore, true) })
			},
		},
		{
			Name:   "repair-takes-block-affinity-for-owner-node",
			Breaks: "repair takes the block's affinity for the node of an allocation without owner attributes (issue 41, item 2.2): with a node-local source it frees the address another node's pod borrowed",
			Old:    "Node: al.OwnerNode(),",
			New:    "Node: al.Node,",
			Catchers: func() []Job {
				return ScriptJobs(func() *Script { return RepairOverBorrowedBlockScript(Legacy) })
			},
		},
		{
			Name:     "repair-judges-another-hosts-record",
			Breaks:   "repair judges a record another host wrote under this node's Calico name by this host's runtime (issue 41, item 2.1): it forgets a running pod's record and releases its quarantine",
			Old:      "Shared: a.snap.RecordsShared,",
			New:      "Shared: false,",
			Catchers: func() []Job { return ScriptJobs(RepairStaleNodenameScript) },
		},
		{
			Name:     "repair-leaves-the-records-own-handle",
			Breaks:   "repair forgets a gone container's record and leaves what Calico holds under its handle, which no audit with a node-local source can judge again: a leak",
			Old:      "actions = append(actions, planOwnRelease(snap, act.rec)...)",
			New:      "_ = planOwnRelease",
			Catchers: func() []Job { return ScriptJobs(func() *Script { return RepairOverBorrowedBlockScript(Legacy) }) },
		},
		{
			Name:     "gc-keeps-a-renamed-hosts-records",
			Breaks:   "the GC verb takes a file store for shared, so after a host rename it keeps every older record as another host's, for ever (issue 41, item 2.5)",
			Old:      "_, shared := g.store.(store.Cluster)\n",
			New:      "_, shared := g.store.(store.Cluster)\n\tshared = true\n",
			Catchers: func() []Job { return ScriptJobs(HostRenameScript) },
		},
		{
			Name:     "gc-forgets-former-nodes",
			Breaks:   "gc --former-node judges nothing under the former name (issue 41, item 2.4): a renamed node's records stay there for ever",
			Old:      "range append([]string{\"\"}, r.formerNodes...)",
			New:      "range []string{\"\"}",
			Catchers: func() []Job { return ScriptJobs(NodeRenameScript) },
		},
		{
			Name:     "del-ignores-a-former-names-record",
			Breaks:   "a DEL that finds no record under the node's name leaves the one this machine wrote under a former Calico name (issue 41, item 2.4): it fences the freed address for ever",
			Old:      "if err := g.releaseRenamed(ctx, att, marker.IPs, env.Path); err != nil {",
			New:      "if err := error(nil); err != nil {",
			Catchers: func() []Job { return ScriptJobs(NodeRenameScript) },
		},
		{
			Name:     "uninstall-forgets-another-hosts-records",
			Breaks:   "uninstall forgets every record under the node's Calico name, also those another machine sharing it (a stale nodename) wrote: that machine's running pods lose their fence",
			Old:      "list, atWork := q.ownRecords(all, u)",
			New:      "list, atWork := all, []callAtWork(nil)",
			Catchers: func() []Job { return ScriptJobs(UninstallStaleNodenameScript) },
		},
		{
			Name:          "dry-run-loop-campaigns",
			Breaks:        "a dry-run gc --dead-nodes --every loop campaigns like an --apply loop (issue 41, item 3): elected first, it leads and never sweeps, and no loop releases a dead node's records",
			Old:           "\tif r.every > 0 && !r.apply.On {\n",
			New:           "\tif false && r.every > 0 && !r.apply.On {\n",
			Catchers:      func() []Job { return ScriptJobs(func() *Script { return ElectionScript(FaultDryRun) }) },
			ByExpectation: true,
		},
		{
			Name:          "leader-never-resigns",
			Breaks:        "a leader whose sweeps keep failing keeps the lead (issue 41, item 3): while it lives, no other loop sweeps",
			Old:           "\tif ok {\n\t\ts.failed = 0\n",
			New:           "\tif true {\n\t\ts.failed = 0\n",
			Catchers:      func() []Job { return ScriptJobs(func() *Script { return ElectionScript(FaultFailingLeader) }) },
			ByExpectation: true,
		},
		{
			Name:          "leaseless-leader-obeyed",
			Breaks:        "a leader key without a live lease (a backup restored without its leases, a key written by hand) leads (issue 41, item 3): the node it names never sweeps, and no candidate campaigns",
			Old:           "\t\tif !clean {\n\t\t\tcontinue\n\t\t}\n",
			New:           "\t\treturn string(kv.Value), nil\n",
			Catchers:      func() []Job { return ScriptJobs(func() *Script { return ElectionScript(FaultLeaselessKey) }) },
			ByExpectation: true,
		},
		{
			Name:          "leader-lease-in-milliseconds",
			Breaks:        "the leader's lease is granted in milliseconds taken for seconds, so a leader that dies without revoking it (SIGKILL, a node's death) keeps the lead a thousand times longer than sweepTTL periods",
			Old:           "concurrency.WithTTL(max(int(ttl.Seconds()), 5))",
			New:           "concurrency.WithTTL(max(int(ttl.Milliseconds()), 5))",
			Catchers:      func() []Job { return ScriptJobs(func() *Script { return ElectionScript(FaultLeaderKilled) }) },
			ByExpectation: true,
		},
		{
			Name:          "grace-by-wall-clock",
			Breaks:        "a sweep judges a gone-note's grace by its own wall clock against the time in the note, as before session 14: a note written by a machine whose clock runs behind (or read by one whose clock runs ahead) releases a dead node's records before the grace",
			Old:           "Since: sg.Since, Grace: sg.Grace, Passed: sg.Passed}",
			New:           "Since: sg.Since, Grace: sg.Grace, Passed: time.Since(sg.Since) >= sg.Grace}",
			Catchers:      func() []Job { return ScriptJobs(func() *Script { return ElectionScript(FaultClockBehind) }) },
			ByExpectation: true,
		},
	}
}

// Build copies safe-ipam's source (go.mod, go.sum, ipam/, plugin/) from
// the module at root into dir/src, applies the mutation and builds the
// mutant with crash points, and the simulator, into dir/bin.
func (mu Mutant) Build(ctx context.Context, root, dir string) (Binaries, error) {
	src := filepath.Join(dir, "src")
	for _, part := range []string{"go.mod", "go.sum", "ipam", "plugin"} {
		if err := copyTree(filepath.Join(root, part), filepath.Join(src, part)); err != nil {
			return Binaries{}, fmt.Errorf("mutant %s: %w", mu.Name, err)
		}
	}
	if err := mu.apply(src); err != nil {
		return Binaries{}, err
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return Binaries{}, err
	}
	return Build(ctx, src, bin)
}

func (mu Mutant) apply(src string) error {
	path, text, i, err := mu.Target(src)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(text[:i]+mu.New+text[i+len(mu.Old):]), 0o644)
}

// Target finds what the mutant changes in the tree at root: the file, its
// text, and where Old starts, right below the mutant's mark.
func (mu Mutant) Target(root string) (path, text string, i int, err error) {
	path, at, err := mu.mark(root)
	if err != nil {
		return "", "", 0, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", 0, fmt.Errorf("mutant %s: %w", mu.Name, err)
	}
	text = string(b)
	i = strings.Index(text[at:], mu.Old)
	if i < 0 || strings.Count(text[at:at+i], "\n") > 3 {
		return "", "", 0, fmt.Errorf("mutant %s no longer applies: %q is not right below its mark in %s; update it in e2e/chaos/mutant.go", mu.Name, mu.Old, path)
	}
	return path, text, at + i, nil
}

// mark finds the mutant's mark under src's ipam/ and plugin/: the one
// file that holds it, and where the line after it starts.
func (mu Mutant) mark(src string) (string, int, error) {
	mark := "// chaos:" + mu.Name + " "
	var path string
	var at int
	for _, part := range []string{"ipam", "plugin"} {
		err := filepath.WalkDir(filepath.Join(src, part), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			switch n := strings.Count(string(b), mark); {
			case n == 0:
				return nil
			case n > 1 || path != "":
				return fmt.Errorf("mutant %s: its mark is in more than one place (%s, %s)", mu.Name, path, p)
			}
			i := strings.Index(string(b), mark)
			path, at = p, i+strings.IndexByte(string(b[i:]), '\n')+1
			return nil
		})
		if err != nil {
			return "", 0, err
		}
	}
	if path == "" {
		return "", 0, fmt.Errorf("mutant %s no longer applies: no %q under ipam/ or plugin/", mu.Name, mark)
	}
	return path, at, nil
}

// copyTree copies a file, or a directory's Go sources (tests left out).
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if path != from && (!strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}
