package builds

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/containernetworking/cni/pkg/types"
)

// ReadEnv, set in a CNI build's environment, asks it for one read of
// Calico's etcd instead of a verb: a request on stdin, the answer on
// stdout (their form is package lookup's).
const ReadEnv = "SAFE_IPAM_READ_CALICO_ETCD"

// AskEtcdBuild runs bin, the etcd build beside the running binary, once
// with ReadEnv set and request on its stdin, and returns what it printed.
// ctx bounds the run.
func AskEtcdBuild(ctx context.Context, bin string, request []byte) ([]byte, error) {
	if !filepath.IsAbs(bin) {
		// The node decides what runs: a bare name would be looked up on
		// PATH (the binary could not tell its own directory).
		return nil, types.NewError(types.ErrPluginNotAvailable,
			fmt.Sprintf("reading Calico's etcd: %s is not a path beside this binary (it cannot tell its own directory); safe-ipam never runs one found on PATH", bin), "")
	}
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), ReadEnv+"=1") // proxies and GODEBUG, as the in-process reads had
	cmd.Stdin = bytes.NewReader(request)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("reading Calico's etcd through %s: %w %s", bin, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}
