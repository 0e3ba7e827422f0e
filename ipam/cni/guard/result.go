package guard

import (
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/types/create"
)

// parseResult decodes a result; an empty version means "as it says".
func parseResult(version string, raw []byte) (types.Result, error) {
	if version == "" {
		return create.CreateFromBytes(raw)
	}
	return create.Create(version, raw)
}

// convertResult converts between result versions, including 1.1.0 to
// 1.0.0, which share one format but have no registered converter.
func convertResult(res types.Result, to string) (types.Result, error) {
	if res.Version() == to {
		return res, nil
	}
	if r, ok := res.(*types100.Result); ok && (to == "1.0.0" || to == "1.1.0") {
		copied := *r
		copied.CNIVersion = to
		return &copied, nil
	}
	out, err := res.GetAsVersion(to)
	if err != nil {
		return nil, types.NewError(types.ErrIncompatibleCNIVersion, fmt.Sprintf("converting result from %s to %s: %v", res.Version(), to, err), "")
	}
	return out, nil
}

// resultIPs lists the result's addresses in CIDR form.
func resultIPs(res types.Result) ([]string, error) {
	r, err := convertResult(res, "1.0.0")
	if err != nil {
		return nil, err
	}
	r100, ok := r.(*types100.Result)
	if !ok {
		return nil, fmt.Errorf("unexpected result type %T", r)
	}
	ips := make([]string, 0, len(r100.IPs))
	for _, ip := range r100.IPs {
		ips = append(ips, ip.Address.String())
	}
	return ips, nil
}
