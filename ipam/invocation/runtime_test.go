package invocation

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/config"
)

// Issue 33, finding 4: the config and the files it names are read under a
// deadline, before the config's own verbTimeout is known: a read that
// hangs (a hung filesystem) fails the call with 11 instead of holding the
// runtime; one that answers gives its answer.
func TestParseWithinItsDeadline(t *testing.T) {
	hung := make(chan struct{})
	defer close(hung)
	want := errors.New("bad config")
	tests := []struct {
		name  string
		parse func() (*config.Config, error)
		code  uint
		err   error
	}{
		{"a read that hangs", func() (*config.Config, error) { <-hung; return nil, nil }, types.ErrTryAgainLater, nil},
		{"a config that is refused", func() (*config.Config, error) { return nil, want }, 0, want},
		{"a config", func() (*config.Config, error) { return &config.Config{}, nil }, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			cfg, err := within(200*time.Millisecond, tt.parse)
			var cniErr *types.Error
			switch {
			case time.Since(start) > 5*time.Second:
				t.Fatalf("within returned after %s", time.Since(start))
			case tt.code != 0 && (!errors.As(err, &cniErr) || cniErr.Code != tt.code):
				t.Fatalf("within = %v; want CNI error %d", err, tt.code)
			case tt.code == 0 && !errors.Is(err, tt.err):
				t.Fatalf("within = %v; want %v", err, tt.err)
			case tt.code == 0 && tt.err == nil && cfg == nil:
				t.Fatal("within lost the config")
			}
		})
	}
}

// Issue 42, item 2: every CNI call has a deadline. A verb whose step the
// deadline cannot reach (a read in a hung filesystem) is left behind
// grace after ipam.verbTimeout, and the call returns; one that stops at
// the deadline, or answers before it, gives its own answer.
func TestEveryCallEndsByItsDeadline(t *testing.T) {
	hung := make(chan struct{})
	defer close(hung)
	own := errors.New("stopped at the deadline")
	tests := []struct {
		name string
		verb func(ctx context.Context) error
		want error
	}{
		{"a step the deadline cannot reach", func(context.Context) error { <-hung; return nil }, errStillBlocked},
		{"a step that stops at the deadline", func(ctx context.Context) error { <-ctx.Done(); return own }, own},
		{"a verb that answers", func(context.Context) error { return nil }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- stopAt(ctx, 100*time.Millisecond, func() error { return tt.verb(ctx) }) }()
			select {
			case err := <-done:
				if !errors.Is(err, tt.want) {
					t.Fatalf("stopAt = %v; want %v", err, tt.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("stopAt still waits 5s after the deadline and its grace")
			}
		})
	}
}
