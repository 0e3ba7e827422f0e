package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/cni/backends"
	"github.com/safe-ipam/safe-ipam/ipam/cni/invocation"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/etcdstore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// What a history does to a cluster besides the CNI calls: the outside
// releases and node deaths, and the admin commands (uninstall, adopt,
// reindex, upgrade, the dead-node gc) as the DaemonSet or an operator
// runs them.

// releaseInCalico frees each address of att that Calico holds, directly
// in Calico's data, as `calicoctl ipam release --ip` does.
func (c *Cluster) releaseInCalico(ctx context.Context, att *Attachment) error {
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	snap, err := c.calicoState(ctx)
	if err != nil {
		return err
	}
	alloc := c.allocator(att.Node)
	for _, ip := range att.IPs {
		held, ok := snap.Lookup(ip)
		if !ok {
			continue
		}
		if err := alloc.Release(ctx, calicosim.Assignment{IP: ip, Block: held.Block, Handle: held.Handle}); err != nil {
			return fmt.Errorf("releasing %s in Calico's data: %w", ip, err)
		}
	}
	return nil
}

// kill is node's death as the cluster sees it: kube-controllers releases
// every address in the node's blocks, deletes the emptied blocks and the
// node's affinities, and deletes its Calico Node; a file store dies with
// the node's disk.
func (c *Cluster) kill(ctx context.Context, machine string) error {
	if c.setup.Kube() {
		return errors.New("node death is played on etcd only (kube-controllers' model writes Calico's etcd)")
	}
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	snap, err := calicosim.State(ctx, c.cli)
	if err != nil {
		return err
	}
	node := c.calicoName(machine)
	alloc := &calicosim.Allocator{Client: c.cli, Node: node}
	for _, aff := range snap.Affinities {
		if aff.Node != node {
			continue
		}
		for _, b := range snap.Blocks {
			if b.Block.CIDR != aff.Block {
				continue
			}
			for _, al := range b.Allocated {
				if err := alloc.Release(ctx, calicosim.Assignment{IP: al.IP, Block: al.Block, Handle: al.Handle}); err != nil {
					return fmt.Errorf("kube-controllers releasing %s of dead %s: %w", al.IP, node, err)
				}
			}
		}
		for _, key := range []string{calico.BlockKey(aff.Block), calico.AffinityKey(node, aff.Block)} {
			if _, err := c.cli.Delete(ctx, key); err != nil {
				return fmt.Errorf("kube-controllers deleting %s: %w", key, err)
			}
		}
	}
	if _, err := c.cli.Delete(ctx, calico.NodeKey(node)); err != nil {
		return fmt.Errorf("kube-controllers deleting Node %s: %w", node, err)
	}
	if c.setup.fileRecords() {
		return os.RemoveAll(c.storeDir(machine))
	}
	return nil
}

// loseNodes takes every Calico Node out of etcd (lost), or puts back the
// ones it took (not lost): the listing a sweep reads empties while every
// node runs.
func (c *Cluster) loseNodes(ctx context.Context, lost bool) error {
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	if !lost {
		for key, value := range c.lostNodes {
			if _, err := c.cli.Put(ctx, key, string(value)); err != nil {
				return err
			}
		}
		c.lostNodes = nil
		return nil
	}
	resp, err := c.cli.Get(ctx, calico.NodePrefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	c.lostNodes = map[string][]byte{}
	for _, kv := range resp.Kvs {
		c.lostNodes[string(kv.Key)] = kv.Value
	}
	_, err = c.cli.Delete(ctx, calico.NodePrefix, clientv3.WithPrefix())
	return err
}

// uninstall is `safe-ipam uninstall` on node once Calico's files are
// back, and sends the node's calls to calico-ipam alone from then on. The
// delegate runs in the harness's environment: Calico 3.x handles
// (histories uninstall only there) and calico-ipam's default host lock.
// After an UninstallRead the forget of the records read then runs here
// (guard.Forget, with uninstall's fate for their quarantines), so the
// calls in between race it; otherwise safe-ipam-admin runs, from the
// build under test.
func (c *Cluster) uninstall(ctx context.Context, call Call) (Outcome, error) {
	c.uninstalled[call.Node] = true
	if recs, read := c.read[call.Node]; read {
		delete(c.read, call.Node)
		return Outcome{}, c.forgetRead(ctx, call.Node, recs)
	}
	bin, conf := filepath.Join(c.work, call.Node, "uninstall", "bin"), filepath.Join(c.work, call.Node, "uninstall", "conf")
	for _, dir := range []string{bin, conf} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return Outcome{}, err
		}
	}
	if err := os.Symlink(c.binaries().Path(CalicoIPAM), filepath.Join(bin, CalicoIPAM)); err != nil && !errors.Is(err, fs.ErrExist) {
		return Outcome{}, err
	}
	if err := c.leaveToForget(call.Node, bin, conf); err != nil {
		return Outcome{}, err
	}
	return c.runAdmin(ctx, call, "uninstall", "--cni-bin-dir", bin, "--cni-conf-dir", conf)
}

// leaveToForget is what uninstall leaves in bin before it restores
// Calico's files (cninode.PendingForgetFile): the node's config, which no
// file names once they are restored. A run cut short left it already.
func (c *Cluster) leaveToForget(node, bin, conf string) error {
	path := filepath.Join(bin, cninode.PendingForgetFile)
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	plugin, err := json.Marshal(c.netConf(node, normalTimeout))
	if err != nil {
		return err
	}
	data, err := json.Marshal(cninode.PendingForget{Networks: []cninode.PendingNetwork{{Path: filepath.Join(conf, "10-calico.conf"), Network: Network, Plugin: plugin}}})
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}

// forgetRead forgets recs, read by an UninstallRead of node.
func (c *Cluster) forgetRead(ctx context.Context, node string, recs []*record.Record) error {
	data, err := json.Marshal(c.netConf(node, normalTimeout))
	if err != nil {
		return err
	}
	cfg, err := config.Parse(data)
	if err != nil {
		return err
	}
	o, err := backends.OpenRelease(ctx, cfg, c.binaries().Dir, "", slog.New(slog.DiscardHandler))
	if err != nil {
		return fmt.Errorf("uninstall on %s: %w", node, err)
	}
	defer o.Close()
	reclaimer := install.NewReclaimer(cfg, "")
	defer reclaimer.Close()
	for round := 1; ; round++ {
		err := c.forget(ctx, o, recs, reclaimer)
		if !errors.Is(err, store.ErrConflict) || round == 3 {
			return err
		}
		// A record changed since uninstall read it (an ADD quarantined
		// with it): uninstall stops and says to run it again, and the
		// operator does.
		if recs, err = o.Store.List(ctx, Network); err != nil {
			return fmt.Errorf("uninstall on %s: %w", node, err)
		}
	}
}

// forget is uninstall's forget of recs, read from node's store.
func (c *Cluster) forget(ctx context.Context, o *invocation.Opened, recs []*record.Record, reclaimer *install.Reclaimer) error {
	for _, rec := range recs {
		if err := o.Guard.Forget(ctx, rec, c.binaries().Dir, reclaimer.FateOf(rec)); err != nil {
			return fmt.Errorf("uninstall on %s: %w", rec.Node, err)
		}
	}
	return nil
}

// readForUninstall is uninstall reading node's records, once Calico's
// files are back; it forgets them at the next Uninstall of node, so the
// calls in between race it.
func (c *Cluster) readForUninstall(ctx context.Context, node string) error {
	stores, err := c.stores()
	if err != nil {
		return err
	}
	defer closeFileStores(c.setup, stores)
	recs, err := stores[node].List(ctx, Network)
	if err != nil {
		return fmt.Errorf("uninstall on %s reading its records: %w", node, err)
	}
	c.read[node] = recs
	return nil
}

// adopt records att, a running attachment with no record, as `safe-ipam
// adopt` does: committed, with its addresses under the one handle
// Calico's data keeps them under, indexed.
func (c *Cluster) adopt(ctx context.Context, att *Attachment) error {
	ctx, cancel := context.WithTimeout(ctx, normalTimeout)
	defer cancel()
	snap, err := calicosim.State(ctx, c.cli)
	if err != nil {
		return err
	}
	rec := &record.Record{Attachment: record.Attachment{Network: Network, ContainerID: att.ContainerID, IfName: att.IfName},
		PodNamespace: Namespace, PodName: att.Pod, PodUID: "uid-" + att.Pod, Node: c.calicoName(att.Node), State: record.Committed,
		Created: time.Now().UTC(), Updated: time.Now().UTC()}
	for _, ip := range att.IPs {
		held, ok := snap.Lookup(ip)
		if !ok || rec.Handle != "" && held.Handle != rec.Handle {
			return fmt.Errorf("adopting %s: Calico does not keep %s under one handle", att, ip)
		}
		rec.Handle = held.Handle
		rec.IPs = append(rec.IPs, netip.PrefixFrom(ip, held.Block.Bits()).String())
	}
	stores, err := c.stores()
	if err != nil {
		return err
	}
	defer closeFileStores(c.setup, stores)
	if _, err := stores[att.Node].Commit(ctx, nil, rec); err != nil {
		return fmt.Errorf("adopting %s: %w", att, err)
	}
	return nil
}

// reindex is install's indexing of node's records.
func (c *Cluster) reindex(ctx context.Context, node string) error {
	stores, err := c.stores()
	if err != nil {
		return err
	}
	defer closeFileStores(c.setup, stores)
	if _, _, err := store.Reindex(ctx, stores[node], Network); err != nil {
		return fmt.Errorf("indexing the records of %s: %w", node, err)
	}
	return nil
}

// upgrade removes every address index entry, as records an older
// safe-ipam wrote had none, then indexes every node's records as the new
// version's install does.
func (c *Cluster) upgrade(ctx context.Context) error {
	for _, n := range c.setup.nodes() {
		if c.setup.Store == EtcdStore {
			if _, err := c.cli.Delete(ctx, etcdstore.AddressPrefix(c.etcdPrefix(n), ""), clientv3.WithPrefix()); err != nil {
				return err
			}
			continue
		}
		links, err := filepath.Glob(filepath.Join(c.storeDir(n), Network, "@*"))
		if err != nil {
			return err
		}
		for _, l := range links {
			if err := os.Remove(l); err != nil {
				return err
			}
		}
	}
	for _, n := range c.setup.nodes() {
		if err := c.reindex(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// closeFileStores closes the file stores stores opened (the etcd ones
// share the cluster's client and stay open).
func closeFileStores(s Setup, stores map[string]store.Store) {
	if !s.fileRecords() {
		return
	}
	for _, st := range stores {
		st.Close()
	}
}

// deadNodesGC runs `safe-ipam gc --dead-nodes --apply` on the call's node
// with its CNI config, as the DaemonSet's gc container does.
func (c *Cluster) deadNodesGC(ctx context.Context, call Call) (Outcome, error) {
	conf, err := json.Marshal(c.netConf(call.Node, normalTimeout))
	if err != nil {
		return Outcome{}, err
	}
	path := filepath.Join(c.work, call.Node, "10-calico.conf")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return Outcome{}, err
	}
	if err := os.WriteFile(path, conf, 0o600); err != nil {
		return Outcome{}, err
	}
	// Two sweeps, as the DaemonSet's loop makes: the first finds a dead
	// node gone, the second releases its records (no grace here: the
	// periods are the script's steps). A sighting is the first alone.
	sweeps := 2
	if call.Verb == DeadNodesSighting {
		sweeps = 1
	}
	// On Calico's Kubernetes datastore its rounds also claim the node's
	// unclaimed records, forget its stale claims and release what it
	// quarantined for another node's holder whose claim is gone (two
	// rounds, no grace).
	var out Outcome
	for range sweeps {
		out, err = c.runAdmin(ctx, call, "gc", "--conf", path, "--cni-bin-dir", c.binaries().Dir, "--dead-nodes", "--dead-node-grace=0s", "--quarantine-grace=0s", "--apply")
		if err != nil || !out.OK() {
			break
		}
	}
	return out, err
}

// runAdmin runs an admin command of safe-ipam (which hands it to
// safe-ipam-admin) for call: its exit code is the outcome's.
func (c *Cluster) runAdmin(ctx context.Context, call Call, args ...string) (Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, hangLimit)
	defer cancel()
	cmd := c.command(ctx, call.Node, c.binaries().Path(SafeIPAM), args...)
	env := c.env(call)
	cmd.Env = env[1:] // no CNI_COMMAND: an admin command, not a CNI call
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return Outcome{}, fmt.Errorf("%s hung for %s: %s", call, hangLimit, out.String())
	}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		return Outcome{Code: uint(exitErr.ExitCode()), Msg: strings.TrimSpace(out.String()), Stderr: out.String()}, nil
	case err != nil:
		return Outcome{}, fmt.Errorf("running %s: %w", call, err)
	}
	return Outcome{Stderr: out.String()}, nil
}
