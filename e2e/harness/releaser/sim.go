package releaser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// maxPeriod bounds the simulator's rounds. kube-controllers reacts to
// watch events at once and sweeps everything every LeakGrace/2; a round a
// second (or four per grace period when that is shorter) reaches the same
// decisions within the bounds the suites wait for.
const maxPeriod = time.Second

// simulator is kube-controllers' node controller: its IPAM garbage
// collection (node/ipam.go) and, on etcd, its node deleter
// (node/node_deleter.go), replayed every round from a fresh reading.
type simulator struct {
	opt   Options
	kube  kubernetes.Interface
	store calicoStore
	log   *slog.Logger
	file  *os.File
	// leaks holds the candidate leaks, by allocation id, with when each
	// was first seen; empty holds the empty affine blocks likewise.
	leaks map[string]time.Time
	empty map[netip.Prefix]time.Time

	cancel  context.CancelFunc
	done    chan struct{}
	stopped sync.Once
	stopErr error
}

func startSimulator(opt Options) (running, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", opt.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("simulator: kubeconfig: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	store, err := openStore(opt, cfg)
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	file, err := os.Create(filepath.Join(opt.Dir, "releaser-simulator.log"))
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &simulator{opt: opt, kube: kube, store: store, file: file, log: slog.New(slog.NewTextHandler(file, nil)),
		leaks: map[string]time.Time{}, empty: map[netip.Prefix]time.Time{}, cancel: cancel, done: make(chan struct{})}
	go s.run(ctx)
	return s, nil
}

func (s *simulator) Name() string    { return "simulator" }
func (s *simulator) logPath() string { return s.file.Name() }

// Stop may be called more than once; later calls return the first's
// result.
func (s *simulator) Stop() error {
	s.stopped.Do(func() {
		s.cancel()
		<-s.done
		s.stopErr = errors.Join(s.store.Close(), s.file.Close())
	})
	return s.stopErr
}

func (s *simulator) period() time.Duration {
	if g := s.opt.LeakGrace / 4; g > 0 && g < maxPeriod {
		return max(g, 50*time.Millisecond)
	}
	return maxPeriod
}

func (s *simulator) run(ctx context.Context) {
	defer close(s.done)
	s.log.Info("started", "datastore", s.opt.Datastore, "leakGrace", s.opt.LeakGrace)
	tick := time.NewTicker(s.period())
	defer tick.Stop()
	for {
		if err := s.round(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("round failed; retrying next round", "err", err)
		}
		select {
		case <-ctx.Done():
			s.log.Info("stopped")
			return
		case <-tick.C:
		}
	}
}

// round is one sync: the node deleter, then syncIPAM's steps in order
// (check allocations, release confirmed leaks, release empty blocks'
// affinities, release deleted nodes' affinities).
func (s *simulator) round(ctx context.Context) error {
	w, err := s.read(ctx)
	if err != nil {
		return err
	}
	if deleted, err := s.deleteStaleNodes(ctx, w); err != nil {
		return err
	} else if deleted {
		if w, err = s.read(ctx); err != nil {
			return err
		}
	}
	confirmed, release := s.checkAllocations(w)
	if err := s.collectLeaks(ctx, w, confirmed); err != nil {
		return err
	}
	if err := s.releaseUnusedBlocks(ctx, w); err != nil {
		return err
	}
	var errs []error
	for _, cnode := range release {
		s.log.Info("cleaning up IPAM affinities for deleted node", "calicoNode", cnode)
		if err := releaseHostAffinities(ctx, s.store, cnode, true); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", cnode, err))
		}
	}
	return errors.Join(errs...)
}

// read takes the round's picture: Kubernetes Nodes and Pods (what the
// real controller's informers hold), Calico's Nodes and IPAM data.
func (s *simulator) read(ctx context.Context) (*world, error) {
	nodes, err := s.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	pods, err := s.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	w := &world{k8sNodes: map[string]bool{}, pods: map[string]*corev1.Pod{}}
	for _, n := range nodes.Items {
		w.k8sNodes[n.Name] = true
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		w.pods[p.Namespace+"/"+p.Name] = p
	}
	if w.calicoNodes, err = s.store.calicoNodes(ctx, w.k8sNodes); err != nil {
		return nil, err
	}
	snap, err := s.store.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	w.addIPAM(snap)
	return w, nil
}

// deleteStaleNodes is the node deleter (etcd only): a Calico Node whose
// Kubernetes node is gone, re-confirmed by a GET, is deleted with what
// Calico's Nodes().Delete removes along with it.
func (s *simulator) deleteStaleNodes(ctx context.Context, w *world) (bool, error) {
	if s.opt.Datastore != Etcd {
		return false, nil
	}
	deleted := false
	for cname, n := range w.calicoNodes {
		if n.k8sName == "" || w.k8sNodes[n.k8sName] {
			continue
		}
		_, err := s.kube.CoreV1().Nodes().Get(ctx, n.k8sName, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			continue
		}
		s.log.Info("deleting Calico Node of deleted Kubernetes node", "calicoNode", cname, "k8sNode", n.k8sName)
		if err := s.store.deleteNode(ctx, cname, s.log); err != nil {
			return deleted, fmt.Errorf("deleting Calico Node %s: %w", cname, err)
		}
		deleted = true
	}
	return deleted, nil
}
