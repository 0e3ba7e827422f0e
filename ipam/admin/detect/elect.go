package detect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// election is the Lease by which one instance per cluster runs the
// rounds (as the dead-node sweeps are one per cluster): a Deployment
// rolled, or a node cut off with its pod still running, never has two
// instances posting the same Events.
type election struct {
	// Lease is "namespace/name"; "" runs the rounds without one.
	Lease string
	// How client-go's leader election keeps it: an instance that stops
	// renewing loses it LeaseDuration after its last renewal.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Identity is this instance's name in the Lease; "": $POD_NAME (the
	// manifest sets it), else the host's name and the process's ID.
	Identity string
}

var defaultElection = election{LeaseDuration: 30 * time.Second, RenewDeadline: 20 * time.Second, RetryPeriod: 4 * time.Second}

func (e election) check() error {
	if e.Lease == "" {
		return nil
	}
	ns, name, ok := strings.Cut(e.Lease, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("--lease %q: want NAMESPACE/NAME", e.Lease)
	}
	return nil
}

// errLostLease ends an instance that held the Lease and lost it: as
// Kubernetes' own controllers do, it exits, and its restart runs for the
// Lease again with nothing of the lost term left running.
var errLostLease = errors.New("this instance lost the Lease: it exits, to run for it again from a clean start")

// run calls lead with a context that ends when this instance no longer
// holds the Lease; it returns once lead has returned: nil when ctx ended,
// errLostLease when the Lease was lost.
func (e election) run(ctx context.Context, client kubernetes.Interface, log *slog.Logger, lead func(context.Context)) error {
	ns, name, _ := strings.Cut(e.Lease, "/")
	id := cmp.Or(e.Identity, os.Getenv("POD_NAME"))
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s_%d", host, os.Getpid())
	}
	led := make(chan struct{})
	var started atomic.Bool
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Client: client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id}},
		LeaseDuration: e.LeaseDuration, RenewDeadline: e.RenewDeadline, RetryPeriod: e.RetryPeriod,
		ReleaseOnCancel: true, Name: e.Lease,
		Callbacks: leaderelection.LeaderCallbacks{
			// client-go runs it in a goroutine of its own, and does not
			// wait for it: run does.
			OnStartedLeading: func(ctx context.Context) {
				started.Store(true)
				defer close(led)
				log.Info("this instance holds the Lease: it runs the rounds", "lease", e.Lease, "identity", id)
				lead(ctx)
			},
			OnStoppedLeading: func() { log.Info("this instance no longer holds the Lease", "lease", e.Lease, "identity", id) },
		},
	})
	if err != nil {
		return fmt.Errorf("--lease %s: %w", e.Lease, err)
	}
	log.Info("waiting for the Lease", "lease", e.Lease, "identity", id)
	elector.Run(ctx)
	// A term whose goroutine had not begun when Run returned begins with
	// its context ended, and lead returns at once; one term per process
	// (errLostLease) so no two terms share the metrics.
	if started.Load() {
		<-led
	}
	if ctx.Err() != nil {
		return nil
	}
	return errLostLease
}
