// Package calicodata finds Calico's reference data for tests: Calico's
// own manifest and IPAM CRDs, and the objects a real calico-ipam wrote,
// kept in ../shared/calico beside the repository and never copied into it.
package calicodata

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Files of ../shared/calico.
const (
	// Manifest is Calico's manifest for an etcd datastore.
	Manifest = "calico-etcd.yaml"
	// CRDs are the IPAM custom resource definitions of Calico's
	// Kubernetes datastore.
	CRDs = "crds-ipam.yaml"
	// KDDSamples are the objects a real calico-ipam wrote there.
	KDDSamples = "kdd-samples.json"
)

// dir is where the files are, relative to the module root.
const dir = "../shared/calico"

// ErrMissing means the shared files are not beside the repository.
var ErrMissing = errors.New("Calico's shared files are not beside the repository")

// Path finds name from the current directory, by walking up to the module
// root (go test runs in the package's directory).
func Path(name string) (string, error) {
	cur, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(cur, "go.mod")); err == nil {
			path := filepath.Join(cur, dir, name)
			if _, err := os.Stat(path); err != nil {
				return "", fmt.Errorf("%w: %v", ErrMissing, err)
			}
			return path, nil
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return "", fmt.Errorf("%w: no go.mod above the working directory", ErrMissing)
		}
		cur = parent
	}
}

// Require is Path for a test: a missing file skips it, except under
// CI=true, where a skip would hide that the proof never ran, so it fails.
func Require(t testing.TB, name string) string {
	t.Helper()
	path, err := Path(name)
	switch {
	case err == nil:
		return path
	case os.Getenv("CI") == "true":
		t.Fatalf("CI=true: %v", err)
	default:
		t.Skip(err)
	}
	return ""
}
