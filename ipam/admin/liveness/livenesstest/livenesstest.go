// Package livenesstest is the contract every liveness source passes: it
// lists what runs with the pod's identity and addresses, forgets what
// stopped, and fails, instead of answering "nothing", when it cannot be
// read.
package livenesstest

import (
	"context"
	"slices"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
)

// Backend is a source under test with the means to drive what it reports.
type Backend interface {
	// Source is the source as an admin command would open it.
	Source() liveness.Source
	// Node is the node the source speaks for.
	Node() string
	// Start makes an attachment of pod namespace/name run and returns it
	// as the source must list it (a runtime chooses its own container ID;
	// a source that names no containers, PodsOnly, returns it without).
	Start(t *testing.T, namespace, name string) liveness.Running
	// Stop makes it stop running.
	Stop(t *testing.T, a liveness.Running)
	// Break makes the source unreadable: a file gone, a runtime or API
	// server stopped.
	Break(t *testing.T)
}

// Run checks the contract on a fresh backend per case.
func Run(t *testing.T, newBackend func(t *testing.T) Backend) {
	t.Run("empty", func(t *testing.T) { empty(t, newBackend(t)) })
	t.Run("lists what runs, with pod and addresses", func(t *testing.T) { listsRunning(t, newBackend(t)) })
	t.Run("forgets what stopped", func(t *testing.T) { forgetsStopped(t, newBackend(t)) })
	t.Run("unreadable is an error", func(t *testing.T) { unreadable(t, newBackend(t)) })
}

func read(t *testing.T, b Backend) *liveness.View {
	t.Helper()
	v, err := b.Source().Read(context.Background())
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if v.Node != b.Node() || !v.Covers(b.Node()) {
		t.Fatalf("view speaks for node %q, want %q", v.Node, b.Node())
	}
	namesContainers(t, v)
	return v
}

// namesContainers: a source whose entries carry no container ID must say
// so (PodsOnly), or every record and container-keyed handle would look
// gone in it; and such a view must never call a container gone.
func namesContainers(t *testing.T, v *liveness.View) {
	t.Helper()
	for _, a := range v.Attachments {
		if a.ContainerID == "" && !v.PodsOnly {
			t.Errorf("%s lists %+v without a container ID but is not PodsOnly", v.Source, a)
		}
	}
	if v.PodsOnly && (!v.ListsContainer("never-started") || !v.ListsAttachment("never-started", "eth0")) {
		t.Errorf("%s names no containers, yet calls one gone", v.Source)
	}
}

// empty: a healthy source with nothing running answers an empty view;
// whether to trust it is the caller's judgment (an audit does not while
// the node holds addresses).
func empty(t *testing.T, b Backend) {
	if v := read(t, b); len(v.Attachments) != 0 {
		t.Fatalf("lists %+v", v.Attachments)
	}
}

func listsRunning(t *testing.T, b Backend) {
	a := b.Start(t, "default", "web-0")
	c := b.Start(t, "prod", "db-0")
	v := read(t, b)
	for _, want := range []liveness.Running{a, c} {
		if !v.ListsAttachment(want.ContainerID, want.IfName) || !v.ListsContainer(want.ContainerID) {
			t.Errorf("%+v not listed in %+v", want, v.Attachments)
		}
		if !v.ListsPod(want.PodNamespace + "." + want.PodName) {
			t.Errorf("pod %s/%s not listed", want.PodNamespace, want.PodName)
		}
		for _, ip := range want.IPs {
			if addr, ok := liveness.ParseAddr(ip); !ok || !v.ListsAddr(addr) {
				t.Errorf("address %s of %s not listed", ip, want.ContainerID)
			}
		}
	}
	if gap := v.PodNamesGap(); gap != "" {
		t.Errorf("a source that lists pods must name them: %s", gap)
	}
}

func forgetsStopped(t *testing.T, b Backend) {
	a := b.Start(t, "default", "web-0")
	c := b.Start(t, "default", "web-1")
	b.Stop(t, a)
	v := read(t, b)
	// A PodsOnly view lists every container (it cannot tell one stopped);
	// the pod and its addresses are what it forgets.
	if (!v.PodsOnly && v.ListsContainer(a.ContainerID)) || v.ListsPod("default.web-0") {
		t.Errorf("stopped %+v still listed: %+v", a, v.Attachments)
	}
	if !v.ListsAttachment(c.ContainerID, c.IfName) {
		t.Errorf("running %+v not listed", c)
	}
	for _, ip := range a.IPs {
		if addr, ok := liveness.ParseAddr(ip); ok && v.ListsAddr(addr) && !slices.Contains(c.IPs, ip) {
			t.Errorf("stopped address %s still listed", ip)
		}
	}
}

func unreadable(t *testing.T, b Backend) {
	b.Start(t, "default", "web-0")
	b.Break(t)
	v, err := b.Source().Read(context.Background())
	if err == nil {
		t.Fatalf("an unreadable source answered %+v", v)
	}
}
