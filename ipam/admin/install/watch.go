package install

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// DefaultSettle is how long the watch waits after the last change it saw
// before it re-asserts: calico-node's installer truncates the conflist and
// then writes it, and a re-assert between the two would read half a file.
const DefaultSettle = 50 * time.Millisecond

// Reassertion is one time the watch put safe-ipam back.
type Reassertion struct {
	// Trigger is the first change of the burst that undid the install.
	Trigger string
	// Seen is when the watch saw that change; Done when the node was
	// protected again. Done-Seen is the unprotected window as the watch
	// measures it: it starts no earlier than the change itself.
	Seen, Done time.Time
	Steps      []string
}

// Window is how long the node was unprotected, as far as the watch saw.
func (r Reassertion) Window() time.Duration { return r.Done.Sub(r.Seen) }

// Watcher keeps safe-ipam installed: whenever a file of the bin or conf
// dir changes, it runs the mode's install again, which changes nothing
// when the node is still protected.
type Watcher struct {
	// Settings are the node settings each install writes (nil: none).
	Settings Settings
	Node     Node
	Mode     Mode
	Self     string
	Settle   time.Duration
	Log      *slog.Logger
	// Reasserted, if set, is told of every re-assertion (tests measure
	// the window with it).
	Reasserted func(Reassertion)
}

// Run installs, then watches until ctx ends. A failed install is logged
// and retried on the next change: the node may not have Calico yet.
func (w *Watcher) Run(ctx context.Context) error {
	release, err := w.Node.holdWatched()
	if err != nil {
		return err
	}
	defer release()
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("starting inotify: %w", err)
	}
	defer fw.Close()
	// Watch first, then install: a change in between is not missed.
	for _, dir := range []string{w.Node.BinDir, w.Node.ConfDir} {
		if err := fw.Add(dir); err != nil {
			return fmt.Errorf("watching %s: %w", dir, err)
		}
	}
	return w.loop(ctx, fw)
}

// maxRetry bounds the wait between attempts while a re-install fails.
const maxRetry = 30 * time.Second

func (w *Watcher) loop(ctx context.Context, fw *fsnotify.Watcher) error {
	settle := w.Settle
	if settle <= 0 {
		settle = DefaultSettle
	}
	// The first attempt is the start; a failed one is tried again, with a
	// growing wait, until it works: the node is unprotected meanwhile, and
	// no further change may come to wake the watch.
	timer := time.NewTimer(0)
	first, trigger, retry := time.Now(), "start", settle
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("inotify watcher closed")
			}
			if !w.relevant(ev) {
				continue
			}
			if first.IsZero() {
				first, trigger = time.Now(), ev.String()
			}
			timer.Reset(settle)
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("inotify watcher closed")
			}
			// An overflowed queue loses events: re-check everything.
			w.Log.Warn("inotify", "error", err)
			if first.IsZero() {
				first, trigger = time.Now(), "inotify: "+err.Error()
			}
			timer.Reset(settle)
		case <-timer.C:
			if w.reassert(first, trigger, retry) {
				first, retry = time.Time{}, settle
				continue
			}
			timer.Reset(retry)
			retry = min(2*retry, maxRetry)
		}
	}
}

// relevant leaves out install's own staging and backups, whose renames
// would otherwise wake the watch once more after each re-assert.
func (w *Watcher) relevant(ev fsnotify.Event) bool {
	name := filepath.Base(ev.Name)
	if isBackupName(name) {
		return false
	}
	if filepath.Dir(ev.Name) == filepath.Clean(w.Node.ConfDir) {
		switch filepath.Ext(name) {
		case ".conf", ".conflist", ".json":
			return true
		}
		return false
	}
	return name == CalicoIPAM || name == CalicoBinary || name == builds.CNIBinary || name == builds.EtcdBinary
}

// reassert installs again and says whether the node is protected.
func (w *Watcher) reassert(seen time.Time, trigger string, retry time.Duration) bool {
	r, err := InstallWith(w.Node, w.Mode, w.Self, w.Settings, false)
	if err != nil {
		w.Log.Error("node not protected: install failed", "mode", w.Mode.Name(), "trigger", trigger, "retry_in", retry, "error", err)
		return false
	}
	if !r.Applied {
		w.Log.Debug("still protected", "mode", w.Mode.Name(), "trigger", trigger)
		return true
	}
	if r.Plan.removes(w.Node.conf(cninode.OwnConflist)) {
		// Calico's config went, or another CNI's now sorts first: the
		// node is not protected, and install will say why.
		w.Log.Error("node not protected: safe-ipam's own config taken off", "mode", w.Mode.Name(), "trigger", trigger, "changes", r.Plan.Describe())
		return false
	}
	re := Reassertion{Trigger: trigger, Seen: seen, Done: time.Now(), Steps: r.Plan.Describe()}
	w.Log.Info("re-asserted safe-ipam", "mode", w.Mode.Name(), "trigger", trigger,
		"unprotected_ms", float64(re.Window().Microseconds())/1000, "changes", re.Steps)
	if w.Reasserted != nil {
		w.Reasserted(re)
	}
	return true
}
