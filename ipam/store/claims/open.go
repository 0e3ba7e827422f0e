package claims

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/cachedir"
	"github.com/safe-ipam/safe-ipam/ipam/config"
	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Timeout bounds each request to the API server: a claim that cannot be
// made in it is left to the node's gc, and the ADD goes on.
const Timeout = 5 * time.Second

// Options are what a caller gives the claims of its store.
type Options struct {
	// Warn is told why a claim could not be made (Store.Warn).
	Warn func(msg string, err error)
	// Exposed is told how the API server's traffic can be read or forged,
	// when it can.
	Exposed func(why string)
	// MayForget is Store.MayForget: the rulebook's judgment, which a
	// store cannot import. Nil takes no claim over.
	MayForget func(cl *Claim, rec *record.Record) bool
	// Hot: a pod's ADD or DEL, which makes no claim for a while after
	// this node found none served (gc's rounds always try, and a round
	// that finds them served ends the while).
	Hot bool
	// At is Store.At (crash-test builds only).
	At func(Point)
	// cacheDir is the config's, where that is noted.
	cacheDir string
}

// ForConfig gives st, a node's record store opened for cfg, the claims of
// Calico's Kubernetes datastore where the records stay on the node (a
// file store; the etcd store's index spans the cluster already). They go
// to the API server calico-ipam reaches, as the identity of Calico's CNI
// kubeconfig, which is read at the first request, so calls that claim
// nothing read nothing.
func ForConfig(cfg *config.Config, st store.Store, node string, o Options) store.Store {
	if !Kept(cfg) || o.Hot && notServedLately(cfg.CacheDir, time.Now()) {
		return st
	}
	o.cacheDir = cfg.CacheDir
	warn := o.Warn
	o.Warn = func(msg string, err error) {
		if errors.Is(err, ErrNotServed) {
			noteNotServed(cfg.CacheDir, time.Now())
		}
		if warn != nil {
			warn(msg, err)
		}
	}
	return Wrap(st, ClientFor(cfg, o.Exposed), node, o)
}

// ClientFor is a Client of the API server calico-ipam reaches from cfg, as
// the identity of Calico's CNI kubeconfig, read at the first request;
// exposed (nil: none) is told how its traffic can be read or forged, when
// it can.
func ClientFor(cfg *config.Config, exposed func(why string)) *Client {
	return NewClient(&lazyAPI{open: func() (*kubeapi.Client, error) {
		if cfg.Calico.Kubeconfig == "" {
			return nil, errors.New("Calico's config names no kubernetes.kubeconfig")
		}
		c, err := kubeapi.New(cfg.Calico.Kubeconfig, Timeout)
		if err == nil && c.Exposure() != "" && exposed != nil {
			exposed(c.Exposure())
		}
		return c, err
	}})
}

// notServedFor is how long a node that found no claims served makes none:
// each ADD would otherwise pay a refused create, and each DEL a refused
// read (docs/performance.md). A CRD applied meanwhile takes effect on the
// node within it, and its gc claims what was committed meanwhile.
const notServedFor = 5 * time.Minute

// notServedFile, in the cache dir, holds when claims were last found not
// served on this node.
const notServedFile = "claims-not-served"

// NotServedAt is when this node's CNI calls or gc last found claims not
// served (their note in cacheDir); ok is false without a note that
// reads. The watch's later full checks ask the API server again after
// such a note.
func NotServedAt(cacheDir string) (at time.Time, ok bool) {
	data, err := cachedir.Get(cacheDir, notServedFile)
	if err != nil || data == nil {
		return time.Time{}, false
	}
	at, err = time.Parse(time.RFC3339Nano, strings.TrimSpace(string(data)))
	return at, err == nil
}

// notServedLately says whether claims were found not served on this node
// less than notServedFor ago (a note from the future is none).
func notServedLately(cacheDir string, now time.Time) bool {
	at, ok := NotServedAt(cacheDir)
	return ok && !at.After(now) && now.Sub(at) < notServedFor
}

// noteNotServed notes that claims were found not served now; a note that
// cannot be written only costs the next call a refused request.
func noteNotServed(cacheDir string, now time.Time) {
	cachedir.Put(cacheDir, notServedFile, []byte(now.UTC().Format(time.RFC3339Nano)))
}

// forgetNotServed removes the note: claims are served.
func forgetNotServed(cacheDir string) {
	if cacheDir != "" {
		_ = os.Remove(filepath.Join(cacheDir, notServedFile))
	}
}

// Kept says whether cfg's records get cluster-wide claims: on Calico's
// Kubernetes datastore, with the file store.
func Kept(cfg *config.Config) bool {
	return cfg.Store.Type != config.StoreEtcd && cfg.Calico.Datastore() == config.DatastoreKubernetes
}

// lazyAPI opens its client at the first request; a kubeconfig it cannot
// read is ErrNotServed, a setting of the node's.
type lazyAPI struct {
	open func() (*kubeapi.Client, error)
	once sync.Once
	c    *kubeapi.Client
	err  error
}

func (l *lazyAPI) client() (*kubeapi.Client, error) {
	l.once.Do(func() {
		if l.c, l.err = l.open(); l.err != nil {
			l.err = errors.Join(ErrNotServed, l.err)
		}
	})
	return l.c, l.err
}

func (l *lazyAPI) CloseIdleConnections() {
	if l.c != nil {
		l.c.CloseIdleConnections()
	}
}

func (l *lazyAPI) Get(ctx context.Context, path string, v any) error {
	c, err := l.client()
	if err != nil {
		return err
	}
	return c.Get(ctx, path, v)
}

func (l *lazyAPI) Create(ctx context.Context, path string, obj, out any) error {
	c, err := l.client()
	if err != nil {
		return err
	}
	return c.Create(ctx, path, obj, out)
}

func (l *lazyAPI) Update(ctx context.Context, path string, obj, out any) error {
	c, err := l.client()
	if err != nil {
		return err
	}
	return c.Update(ctx, path, obj, out)
}

func (l *lazyAPI) GetDated(ctx context.Context, path string, v any) (time.Time, error) {
	c, err := l.client()
	if err != nil {
		return time.Time{}, err
	}
	return c.GetDated(ctx, path, v)
}

func (l *lazyAPI) Delete(ctx context.Context, path, uid, resourceVersion string) error {
	c, err := l.client()
	if err != nil {
		return err
	}
	return c.Delete(ctx, path, uid, resourceVersion)
}
