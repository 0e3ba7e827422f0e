package testbed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// netnsDir is where `ip netns add` bind-mounts namespaces.
const netnsDir = "/var/run/netns/"

// Netns is a named network namespace made with `ip netns add`, so that
// cnitool and the plugins, all separate processes, can open it by path.
type Netns struct {
	Name string
}

// Path is the netns path passed to cnitool.
func (n Netns) Path() string { return netnsDir + n.Name }

// IPv4Addrs returns the global IPv4 addresses configured inside the
// netns, as `ip -o addr` reports them.
func (n Netns) IPv4Addrs(ctx context.Context) ([]netip.Prefix, error) {
	out, err := ipCmd(ctx, "-n", n.Name, "-o", "-4", "addr", "show", "scope", "global")
	if err != nil {
		return nil, err
	}
	return parseAddrLines(out)
}

// parseAddrLines reads `ip -o addr` lines such as
// "2: eth0    inet 10.244.0.1/29 brd 10.244.0.7 scope global eth0\ ...".
func parseAddrLines(out string) ([]netip.Prefix, error) {
	var addrs []netip.Prefix
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || (f[2] != "inet" && f[2] != "inet6") {
			continue
		}
		p, err := netip.ParsePrefix(f[3])
		if err != nil {
			return nil, fmt.Errorf("parsing address in %q: %w", line, err)
		}
		addrs = append(addrs, p)
	}
	return addrs, nil
}

// AddStubAddress gives the netns an eth0 holding addr without CNI, the
// way a pod created before the test (before an upgrade) already holds its
// address.
func (n Netns) AddStubAddress(ctx context.Context, addr netip.Prefix) error {
	if err := n.AddStubLink(ctx, IfName); err != nil {
		return err
	}
	steps := [][]string{
		{"-n", n.Name, "addr", "add", addr.String(), "dev", IfName},
		{"-n", n.Name, "link", "set", IfName, "up"},
	}
	for _, s := range steps {
		if _, err := ipCmd(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

// AddStubLink creates an interface that leads nowhere: a veth whose peer
// stays in the same netns (kernels without the dummy module have veth,
// which ptp needs anyway). Taking the name a plugin wants makes its ADD
// fail after IPAM has allocated, like a sandbox whose network setup
// breaks half way.
func (n Netns) AddStubLink(ctx context.Context, ifname string) error {
	_, err := ipCmd(ctx, "-n", n.Name, "link", "add", ifname, "type", "veth", "peer", "name", ifname+"-stub")
	return err
}

// NetnsSet creates namespaces under a common name prefix and removes them
// all, with their veth pairs, when done.
type NetnsSet struct {
	prefix string

	mu      sync.Mutex
	created []Netns
}

// NewNetnsSet returns an empty set. The prefix identifies namespaces a
// crashed earlier run may have left behind; see RemoveLeftovers.
func NewNetnsSet(prefix string) *NetnsSet { return &NetnsSet{prefix: prefix} }

// Add creates the netns prefix+name.
func (s *NetnsSet) Add(ctx context.Context, name string) (Netns, error) {
	n := Netns{Name: s.prefix + name}
	if _, err := ipCmd(ctx, "netns", "add", n.Name); err != nil {
		return Netns{}, err
	}
	s.mu.Lock()
	s.created = append(s.created, n)
	s.mu.Unlock()
	// Container plugins expect lo up, as a runtime would leave it.
	if _, err := ipCmd(ctx, "-n", n.Name, "link", "set", "lo", "up"); err != nil {
		return n, err
	}
	return n, nil
}

// Remove deletes one netns of the set early, for example to model a DEL
// that arrives after the runtime destroyed the sandbox. libcni's cached
// result stays, as it does on a real node.
func (*NetnsSet) Remove(ctx context.Context, n Netns) error {
	return removeNetns(ctx, n.Name)
}

// RemoveAll deletes every netns the set made, those removed early
// included, and what libcni cached for them.
func (s *NetnsSet) RemoveAll(ctx context.Context) error {
	s.mu.Lock()
	created := s.created
	s.created = nil
	s.mu.Unlock()
	var errs []error
	for _, n := range created {
		errs = append(errs, removeNetns(ctx, n.Name), removeCachedResults(n))
	}
	return errors.Join(errs...)
}

// RemoveLeftovers deletes every netns whose name starts with the set's
// prefix: the remains of a run that was killed before its cleanup ran.
func (s *NetnsSet) RemoveLeftovers(ctx context.Context) error {
	names, err := listNetns(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if strings.HasPrefix(name, s.prefix) {
			errs = append(errs, removeNetns(ctx, name), removeCachedResults(Netns{Name: name}))
		}
	}
	return errors.Join(errs...)
}

// removeNetns deletes the veths inside first: deleting one end removes
// the host end at once, while the kernel tears a dead netns down lazily.
func removeNetns(ctx context.Context, name string) error {
	if out, err := ipCmd(ctx, "-n", name, "-o", "link", "show", "type", "veth"); err == nil {
		for _, ifname := range vethNames(out) {
			// Deleting one end of a pair inside the netns takes the other.
			if _, err := ipCmd(ctx, "-n", name, "link", "del", ifname); err != nil && !strings.Contains(err.Error(), "Cannot find device") {
				return err
			}
		}
	}
	if _, err := ipCmd(ctx, "netns", "del", name); err != nil && !strings.Contains(err.Error(), "No such file") {
		return err
	}
	return nil
}

// libcniCacheDir is where cnitool's libcni caches results; cnitool has no
// option to move it.
const libcniCacheDir = "/var/lib/cni/results"

// removeCachedResults drops what libcni cached for attachments of the
// netns that were never DELeted, so a later GC does not act on them.
func removeCachedResults(n Netns) error {
	files, err := filepath.Glob(filepath.Join(libcniCacheDir, "*-"+cnitoolContainerID(n.Path())+"-*"))
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// vethNames reads `ip -o link` lines such as "2: eth0@if7: <...> ...".
func vethNames(out string) []string {
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		names = append(names, name)
	}
	return names
}

func listNetns(ctx context.Context) ([]string, error) {
	out, err := ipCmd(ctx, "netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names, nil
}

func ipCmd(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ip", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
