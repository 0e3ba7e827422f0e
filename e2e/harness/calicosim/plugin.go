package calicosim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/dynamic"

	"github.com/safe-ipam/safe-ipam/ipam/calico"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// About is printed when the binary runs without CNI_COMMAND.
const About = "calico-ipam simulator (safe-ipam e2e): Calico IPAM in etcdv3 or the Kubernetes datastore, for tests"

// Environment variables the simulator reads besides the CNI ones.
const (
	EnvLockFile = "CALICO_IPAM_LOCK_FILE" // lock path, or "none"
	EnvHandles  = "CALICO_SIM_HANDLES"    // "modern" (default) or "legacy"
	EnvTimeout  = "CALICO_SIM_TIMEOUT"    // Go duration bounding one command
)

// defaultTimeout bounds one CNI command, lock wait included, so that a
// test with etcd down fails instead of hanging.
const defaultTimeout = 30 * time.Second

// Versions are the CNI versions calico-ipam declares: 0.1.0 to 1.0.0, so
// a 1.1.0 config fails in skel with "incompatible CNI versions".
func Versions() version.PluginInfo {
	return version.PluginSupports("0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0")
}

// Plugin runs CNI commands. Its environment comes through Getenv so that
// tests can run many in-process plugins with different settings.
type Plugin struct {
	Getenv func(string) string
	Stdout io.Writer // CNI results
	Stderr io.Writer // logs
	Now    func() time.Time
	// NodenameFile is the nodename_file used when the config sets none;
	// tests point it away from the host's DefaultNodenameFile.
	NodenameFile string
}

// New returns a plugin reading the given environment and streams.
func New(getenv func(string) string, stdout, stderr io.Writer) *Plugin {
	return &Plugin{Getenv: getenv, Stdout: stdout, Stderr: stderr, Now: time.Now, NodenameFile: DefaultNodenameFile}
}

// parseConf reads the config with the plugin's default nodename_file.
func (p *Plugin) parseConf(stdin []byte) (*NetConf, error) {
	return ParseNetConf(stdin, p.NodenameFile)
}

// Funcs wires the plugin into skel: ADD, DEL and a no-op CHECK; like
// calico-ipam there is no GC or STATUS.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.Add, Del: p.Del, Check: p.Check}
}

// Add assigns addresses and prints the result in the config's version.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	conf, err := p.parseConf(args.StdinData)
	if err != nil {
		return err
	}
	res, err := p.Allocate(args)
	if err != nil {
		return err
	}
	out, err := res.GetAsVersion(conf.CNIVersion)
	if err != nil {
		return fmt.Errorf("converting result to %s: %w", conf.CNIVersion, err)
	}
	return out.PrintTo(p.Stdout)
}

// Check does nothing and succeeds.
func (p *Plugin) Check(*skel.CmdArgs) error { return nil }

// call is everything one command needs, opened from its args.
type call struct {
	conf   *NetConf
	mode   HandleMode
	pod    PodArgs
	log    *slog.Logger
	cli    *clientv3.Client  // etcdv3
	kube   dynamic.Interface // kubernetes
	lock   hostLock
	alloc  *Allocator
	ctx    context.Context
	cancel context.CancelFunc
	// closeLog closes log_file_path, if the config set one.
	closeLog func()
}

// open checks the config and CNI_ARGS (with checkArgs, the verb's own
// rules) before it takes the lock or connects, so bad input changes
// nothing.
func (p *Plugin) open(args *skel.CmdArgs, checkArgs func(string) error) (*call, error) {
	conf, err := p.parseConf(args.StdinData)
	if err != nil {
		return nil, err
	}
	if err := checkArgs(args.Args); err != nil {
		return nil, err
	}
	mode, err := ParseHandleMode(p.Getenv(EnvHandles))
	if err != nil {
		return nil, err
	}
	pod, err := ParsePodArgs(args.Args)
	if err != nil {
		return nil, err
	}
	timeout, err := p.timeout()
	if err != nil {
		return nil, err
	}
	log, closeLog, err := openLog(p.Stderr, conf)
	if err != nil {
		return nil, err
	}
	c := &call{conf: conf, mode: mode, pod: pod, log: log, closeLog: closeLog}
	c.ctx, c.cancel = context.WithTimeout(context.Background(), timeout)
	if err := c.connect(p.lockPath()); err != nil {
		c.close()
		return nil, err
	}
	c.alloc = &Allocator{Client: c.cli, Kube: c.kube, Node: conf.Nodename, Now: p.Now, Log: c.log}
	return c, nil
}

func (c *call) connect(lockPath string) error {
	var err error
	if c.lock, err = lockHost(c.ctx, lockPath, c.log); err != nil {
		return err
	}
	if c.conf.DatastoreType == DatastoreKubernetes {
		c.kube, err = NewKubeClient(c.conf.Kubernetes.Kubeconfig)
		return err
	}
	c.cli, err = NewClient(c.conf)
	return err
}

func (c *call) close() {
	if c.cli != nil {
		c.cli.Close()
	}
	c.lock.unlock()
	c.cancel()
	c.closeLog()
}

func (p *Plugin) timeout() (time.Duration, error) {
	v := p.Getenv(EnvTimeout)
	if v == "" {
		return defaultTimeout, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 10s", EnvTimeout, v)
	}
	return d, nil
}

func (p *Plugin) lockPath() string {
	if path := p.Getenv(EnvLockFile); path != "" {
		return path
	}
	return DefaultLockFile
}

// Allocate does the work of ADD and returns the result in the current
// CNI version instead of printing it.
func (p *Plugin) Allocate(args *skel.CmdArgs) (*current.Result, error) {
	c, err := p.open(args, CheckAddArgs)
	if err != nil {
		return nil, err
	}
	defer c.close()
	wants, err := c.families()
	if err != nil {
		return nil, err
	}
	// Calico looks the node up before allocating; its error text is part
	// of what a wrapper observes, so it is returned unwrapped.
	st := c.alloc.store()
	if err := st.checkNode(c.ctx, c.conf.Nodename, c.pod.Namespace); err != nil {
		return nil, err
	}
	all, err := st.ipPools(c.ctx)
	if err != nil {
		return nil, err
	}
	handle := c.mode.AddHandle(c.conf.Name, args.ContainerID, c.pod)
	secondary := c.attributes(p.now())
	vm, err := c.vmOf(c.ctx)
	if err != nil {
		return nil, err
	}
	if vm != nil {
		if handle, err = record.VMHandle(c.conf.Name, vm.namespace, vm.vmi); err != nil {
			return nil, err
		}
		secondary = vm.attributes(secondary)
		if res, err := c.reuseVMAddrs(handle, vm, secondary); res != nil || err != nil {
			return res, err
		}
	}
	var done []Assignment
	for _, fam := range wants {
		asg, err := c.assign(all, fam, handle, secondary)
		if err != nil {
			return nil, errors.Join(err, c.undo(done))
		}
		done = append(done, asg)
	}
	c.log.Info("assigned", "handle", handle, "assignments", done)
	return result(done), nil
}

// reuseVMAddrs gives a VM's pod the addresses its handle already holds:
// a new pod of the VM becomes their active owner, a live-migration target
// their alternate owner, and gets no routes (the source keeps them until
// the migration completes). With none held, a target is refused and any
// other pod allocates (nil, nil).
func (c *call) reuseVMAddrs(handle string, vm *vmPod, owner map[string]string) (*current.Result, error) {
	held, err := c.handleAddrs(handle)
	if err != nil {
		return nil, err
	}
	target := vm.migrationUID != ""
	if len(held) == 0 {
		if target {
			return nil, fmt.Errorf("migration target pod but no IP allocated to VM handle %s", handle)
		}
		return nil, nil
	}
	err = c.setOwners(handle, func(a *calico.Attribute) {
		if target {
			a.SetAlternate(owner)
		} else {
			a.Secondary = maps.Clone(owner)
		}
	})
	if err != nil {
		return nil, err
	}
	c.log.Info("reused the VM's addresses", "handle", handle, "migrationTarget", target, "assignments", held)
	return reusedResult(held, target), nil
}

// reusedResult reports a VM's addresses as calico-ipam does when it
// reuses them: each with a host mask, with a route to itself for the
// VM's next pod, and no route at all for a migration target (the source
// keeps the route until the migration completes).
func reusedResult(asgs []Assignment, target bool) *current.Result {
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion, Routes: []*types.Route{}}
	for _, asg := range asgs {
		host := net.CIDRMask(asg.IP.BitLen(), asg.IP.BitLen())
		res.IPs = append(res.IPs, &current.IPConfig{Address: net.IPNet{IP: asg.IP.AsSlice(), Mask: host}})
		if !target {
			res.Routes = append(res.Routes, &types.Route{Dst: net.IPNet{IP: asg.IP.AsSlice(), Mask: host}})
		}
	}
	return res
}

func (p *Plugin) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// families lists the address families the config asks for.
func (c *call) families() ([]calico.Family, error) {
	v4, _ := c.conf.AssignIPv4() // checked by ParseNetConf
	v6, _ := c.conf.AssignIPv6()
	var fams []calico.Family
	if v4 {
		fams = append(fams, calico.IPv4)
	}
	if v6 {
		fams = append(fams, calico.IPv6)
	}
	if len(fams) == 0 {
		return nil, errors.New("ipam.assign_ipv4 and ipam.assign_ipv6 are both false: nothing to assign")
	}
	return fams, nil
}

func (c *call) assign(all []calico.IPPool, fam calico.Family, handle string, secondary map[string]string) (Assignment, error) {
	wanted := c.conf.IPAM.IPv4Pools
	if fam == calico.IPv6 {
		wanted = c.conf.IPAM.IPv6Pools
	}
	pools, err := SelectPools(all, wanted, fam)
	if err != nil {
		return Assignment{}, err
	}
	return c.alloc.Assign(c.ctx, pools, handle, secondary)
}

// undo releases the addresses of a dual-stack ADD that failed half-way.
func (c *call) undo(done []Assignment) error {
	var errs []error
	for _, asg := range done {
		errs = append(errs, c.alloc.Release(c.ctx, asg))
	}
	return errors.Join(errs...)
}

// attributes are the secondary attributes of an allocation. Calico 3.x
// records node, timestamp and, when known, namespace and pod; Calico 2.x
// recorded none. Calico 2.x had no IPAM on the Kubernetes datastore, so
// there legacy handles mean a 3.x build with pod-name handles, which
// records the attributes (kdd-samples.json, steps 3 and 4).
func (c *call) attributes(now time.Time) map[string]string {
	if c.mode == LegacyHandles && c.kube == nil {
		return nil
	}
	attrs := map[string]string{
		"node":      c.conf.Nodename,
		"timestamp": now.UTC().Round(0).String(),
	}
	if c.pod.HasPod() {
		attrs["namespace"], attrs["pod"] = c.pod.Namespace, c.pod.Name
	}
	return attrs
}

// result reports each address with its block's mask and a route to the
// block, as calico-ipam does.
func result(asgs []Assignment) *current.Result {
	res := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	for _, asg := range asgs {
		mask := net.CIDRMask(asg.Block.Bits(), asg.Block.Addr().BitLen())
		res.IPs = append(res.IPs, &current.IPConfig{Address: net.IPNet{IP: asg.IP.AsSlice(), Mask: mask}})
		res.Routes = append(res.Routes, &types.Route{Dst: net.IPNet{IP: asg.Block.Addr().AsSlice(), Mask: mask}})
	}
	return res
}

// Del releases the handles of the configured generation. A handle that
// does not exist is fine, so DEL can be repeated.
func (p *Plugin) Del(args *skel.CmdArgs) error {
	c, err := p.open(args, CheckDelArgs)
	if err != nil {
		return err
	}
	defer c.close()
	vm, err := c.vmOf(c.ctx)
	switch {
	case errors.Is(err, errPodGone):
		c.log.Info("the virt-launcher pod is gone: nothing to release")
		return nil
	case err != nil:
		return err
	case vm != nil:
		return c.releaseVM(vm)
	}
	var errs []error
	for _, h := range c.mode.DelHandles(c.conf.Name, args.ContainerID, c.pod) {
		freed, err := c.alloc.ReleaseHandle(c.ctx, h)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.log.Info("released", "handle", h, "ips", freed)
	}
	return errors.Join(errs...)
}

// releaseVM clears this pod's ownership of its VM's addresses, and
// releases the VM's handle only when the VM (or a standalone VMI) is
// being deleted and no pod owns them any more: a late DEL of an old pod
// leaves the running pod's address and ownership alone.
func (c *call) releaseVM(vm *vmPod) error {
	handle, err := record.VMHandle(c.conf.Name, vm.namespace, vm.vmi)
	if err != nil {
		return err
	}
	// calico-ipam lists the handle's addresses first, and a handle that
	// is gone (released from outside) fails the DEL, until the pod is
	// gone too.
	h, err := c.alloc.store().readHandle(c.ctx, handle)
	if err != nil {
		return err
	}
	if h.handle == nil {
		return fmt.Errorf("resource does not exist: IPAM handle %s", handle)
	}
	err = c.setOwners(handle, func(a *calico.Attribute) {
		switch {
		case calico.OwnedBy(a.Secondary, vm.namespace, vm.pod):
			a.Secondary = nil
		case calico.OwnedBy(a.Alternate(), vm.namespace, vm.pod):
			a.SetAlternate(nil)
		}
	})
	if err != nil || !vm.deleting {
		return err
	}
	left, err := c.ownersLeft(handle)
	if err != nil || left {
		return err
	}
	freed, err := c.alloc.ReleaseHandle(c.ctx, handle)
	c.log.Info("released the VM's handle", "handle", handle, "ips", freed)
	return err
}
