//go:build tools

// Package tools pins the Kubernetes commands the tests run in this module,
// so `go build k8s.io/kubernetes/cmd/<name>` resolves here: kube-apiserver
// for the API server tests, and kubelet, kube-controller-manager and
// kube-scheduler for the one-node cluster (e2e/harness/kubenode).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
