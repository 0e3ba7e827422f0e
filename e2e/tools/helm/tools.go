//go:build tools

// Package tools pins helm, which the chart's tests run (helm lint, helm
// template) and the cluster suite installs safe-ipam with, so that `go
// build helm.sh/helm/v3/cmd/helm` resolves here.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
