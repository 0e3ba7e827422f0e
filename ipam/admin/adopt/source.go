package adopt

import (
	"context"
	"errors"

	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
)

// kubeletIfName is the interface name kubelet gives the pod network. A
// runtime's CRI status names a sandbox's addresses but not its interface.
const kubeletIfName = "eth0"

// readEntries reads the liveness source the operator chose (src). The
// CNI cache is read leniently: an entry that does not decode or names
// another node is skipped with its reason, and the others are still
// adopted. Any source that cannot be read at all is an error, whether
// named or the default cache: adopt writes nothing on a guess.
func readEntries(ctx context.Context, src liveness.Source) (string, []Entry, []Skip, error) {
	if cache, ok := src.(liveness.CNICache); ok {
		return readCache(ctx, cache)
	}
	if src == nil {
		return "", nil, nil, errors.New("no liveness source: give " + liveness.Say(liveness.NamesContainers, liveness.Kind.FlagArg, "or"))
	}
	view, err := src.Read(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	if err := view.NeedContainers("adopt"); err != nil {
		return "", nil, nil, err
	}
	entries := make([]Entry, 0, len(view.Attachments))
	for _, a := range view.Attachments {
		if a.IfName == "" && view.ContainersOnly {
			a.IfName = kubeletIfName
		}
		entries = append(entries, Entry{Running: a, From: view.Source + ": " + a.ContainerID})
	}
	return view.Source, entries, nil, nil
}

func readCache(ctx context.Context, c liveness.CNICache) (string, []Entry, []Skip, error) {
	cached, skipped, err := c.ReadLenient(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	entries := make([]Entry, 0, len(cached))
	for _, a := range cached {
		entries = append(entries, Entry{Running: a.Running, Result: a.Result, From: a.Path})
	}
	skips := make([]Skip, 0, len(skipped))
	for _, s := range skipped {
		skips = append(skips, Skip{From: s.Path, Reason: s.Reason})
	}
	return "cni-cache " + c.Dir, entries, skips, nil
}
