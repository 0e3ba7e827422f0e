package chaos

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/scaffold"
)

// suite is what TestMain prepares once: safe-ipam built with crash
// points and the simulator. It is only read after TestMain sets it.
var suite struct {
	bin Binaries
	err error
}

func TestMain(m *testing.M) {
	(&scaffold.Suite{Name: "chaos", Build: func(ctx context.Context, dir string) error {
		// A failed build fails each test (binaries), not the run.
		suite.bin, suite.err = Build(ctx, "", dir)
		return nil
	}}).Main(m)
}

// binaries fails the test if the build did.
func binaries(t testing.TB) Binaries {
	t.Helper()
	if suite.err != nil {
		t.Fatalf("building safe-ipam and the simulator: %v", suite.err)
	}
	return suite.bin
}

// play plays jobs on one cluster per core and one more, since outages
// leave cores idle, and returns the reports.
func play(t *testing.T, bin Binaries, jobs []Job) []*Report {
	t.Helper()
	dir, err := os.MkdirTemp(TempRoot(), "safe-ipam-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	opt := Options{Bin: bin, Dir: dir, Parallel: runtime.NumCPU() + 1}
	if testing.Verbose() && os.Getenv("CHAOS_TRANSCRIPT") != "" {
		opt.Logf = t.Logf
	}
	reports, err := Play(testContext(t), opt, jobs)
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	return reports
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// requireOK fails the test for every report that broke an invariant or an
// expectation, with its transcript and how to replay it.
func requireOK(t *testing.T, reports []*Report) {
	t.Helper()
	for _, r := range reports {
		if r.OK() {
			continue
		}
		t.Errorf("%s", r.Explain(r.Replay()))
	}
}

// seedsFromEnv reads CHAOS_SEED (one seed, for replay) or returns def.
func seedsFromEnv(t *testing.T, def []uint64) []uint64 {
	t.Helper()
	v := os.Getenv("CHAOS_SEED")
	if v == "" {
		return def
	}
	seed, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("CHAOS_SEED=%q: %v", v, err)
	}
	return []uint64{seed}
}

func seedRange(from, n uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = from + uint64(i)
	}
	return out
}
