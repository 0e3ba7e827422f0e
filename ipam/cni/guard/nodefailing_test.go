package guard

import (
	"errors"
	"fmt"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/safe-ipam/safe-ipam/ipam/store"
)

// Issue 44, item 1: which failures tell the watch that the node cannot
// start pods. The call's own input, or a fenced address the runtime's
// retry gets past, do not.
func TestNodeFailing(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"none", nil, false},
		{"the store does not answer", storeError("reserving", fmt.Errorf("etcd: %w", store.ErrUnavailable)), true},
		{"past the deadline", types.NewError(types.ErrTryAgainLater, "ADD did not finish within ipam.verbTimeout", ""), true},
		{"calico-ipam's own error", &types.Error{Code: 100 + 1, Msg: "datastore is not ready"}, true},
		{"not a CNI error", errors.New("exec: no such file"), true},
		{"a fenced address", &fenced{err: types.NewError(types.ErrTryAgainLater, "10.0.0.1 is held", "")}, false},
		{"a fence the store did not take", &fenced{err: storeError("quarantining", store.ErrUnavailable), node: true}, true},
		{"the same sandbox's retry after a fence", &sandboxRetry{types.NewError(types.ErrTryAgainLater, "quarantined", "")}, false},
		{"bad input", types.NewError(types.ErrInvalidEnvironmentVariables, "CNI_CONTAINERID", ""), false},
		{"a bad config", types.NewError(types.ErrInvalidNetworkConfig, "ipam.store", ""), false},
		{"calico-ipam's code 100", &types.Error{Code: 100, Msg: "no IP addresses available"}, true},
	} {
		if got := NodeFailing(tc.err); got != tc.want {
			t.Errorf("%s: NodeFailing(%v) = %v; want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
