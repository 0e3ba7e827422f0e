// Package calicodata is the project's own Calico test data, written from
// the facts of Calico's manifests and of the data a real calico-ipam wrote
// (never copied from them): Calico's IPAM CRDs with loose schemas (and the
// other CRDs kube-controllers needs), the
// network config template and scheduling of calico-node, and samples of
// the objects calico-ipam writes on the Kubernetes datastore. The files
// live in this package's data/ directory, so every test finds them in any
// clone.
package calicodata

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Files of data/.
const (
	// Manifest holds calico-node's calico-config ConfigMap (its
	// cni_network_config template) and its DaemonSet's scheduling.
	Manifest = "calico-node.yaml"
	// CRDs are the IPAM custom resource definitions of Calico's
	// Kubernetes datastore.
	CRDs = "crds-ipam.yaml"
	// KDDSamples are the objects calico-ipam writes there, step by step.
	KDDSamples = "kdd-samples.json"
	// KubeControllersCRDs are the other custom resource definitions
	// Calico's kube-controllers needs on the Kubernetes datastore.
	KubeControllersCRDs = "crds-kube-controllers.yaml"
)

// Path is the file name of data/, in this package's source directory.
func Path(name string) string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "data", name)
}

// Require is Path for a test, which fails if the file cannot be read.
func Require(t testing.TB, name string) string {
	t.Helper()
	path := Path(name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("calicodata: %v", err)
	}
	return path
}
