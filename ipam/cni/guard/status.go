package guard

import (
	"context"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/cni/delegate"
)

// Status reports whether ADD can work: the store answers and the delegate
// is there (and ready, if it has STATUS).
func (g *Guard) Status(ctx context.Context, env delegate.Env) error {
	if err := g.store.Ping(ctx); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("record store: %v", err), "")
	}
	if !g.delegate.Speaks("1.1.0") {
		return nil
	}
	conf := g.cfg.DelegateConfig("1.1.0", nil)
	return g.delegate.Run(ctx, "STATUS", conf, env)
}
