package kubenode

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
)

// ClusterOptions say what a cluster is started with.
type ClusterOptions struct {
	// Names are the nodes' names in Kubernetes, one node each.
	Names []string
	// Node is what every node is started with; its Name is not used.
	Node Options
	// NodeMonitorGracePeriod is how long a node's kubelet may be silent
	// before its Node turns NotReady (and is tainted unreachable); 0 means
	// 3 minutes, so that a node starved by a loaded CI machine is not.
	NodeMonitorGracePeriod time.Duration
}

// Cluster is a running cluster: its API server, its control plane and its
// nodes.
type Cluster struct {
	// API is the cluster's kube-apiserver; its etcd is API.Etcd().
	API   *kubetest.Server
	Nodes []*Node
	// control runs the API server, kube-controller-manager and
	// kube-scheduler: a node no test kills, and the last one stopped.
	control *Node
}

// StartCluster starts a cluster and registers its teardown with t.
func StartCluster(t testing.TB, opt ClusterOptions) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(2+len(opt.Names))*time.Minute)
	defer cancel()
	c := &Cluster{}
	t.Cleanup(func() { c.close(t) })
	if err := c.start(ctx, opt); err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *Cluster) start(ctx context.Context, opt ClusterOptions) error {
	sweep()
	var err error
	c.control, err = newNode(ctx, "control-plane", "", opt.Node, controlSteps(opt.NodeMonitorGracePeriod))
	if err != nil {
		return err
	}
	c.API = c.control.API
	for i, name := range opt.Names {
		// Each node its own address: 10.213.255.1, .2, ...
		n, err := newNode(ctx, name, fmt.Sprintf("10.213.255.%d", i+1), opt.Node, nodeSteps(c.API))
		if n != nil {
			c.Nodes = append(c.Nodes, n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// controlSteps start the API server, and the controllers and the scheduler
// in namespaces of their own, with no kubelet.
func controlSteps(grace time.Duration) func(*Node) []step {
	if grace == 0 {
		grace = 3 * time.Minute
	}
	return func(n *Node) []step {
		return []step{
			{"kube-apiserver", func(context.Context) error {
				var err error
				n.ownAPI, err = kubetest.New(filepath.Join(n.Dir, "api"))
				n.API = n.ownAPI
				return err
			}},
			{"namespaces", n.startHolder},
			{"proxies", n.startProxies},
			{"kube-controller-manager", func(ctx context.Context) error { return n.startControllerManager(ctx, grace) }},
			{"kube-scheduler", n.startScheduler},
		}
	}
}

// Node is the node named name, nil if there is none.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// WaitReady waits until every node is Ready and untainted.
func (c *Cluster) WaitReady(ctx context.Context) error {
	for _, n := range c.Nodes {
		if err := n.WaitReady(ctx); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	return nil
}

// close stops the nodes, then the control plane (the API server last),
// keeping every component's log when t failed.
func (c *Cluster) close(t testing.TB) {
	for i := len(c.Nodes) - 1; i >= 0; i-- {
		c.Nodes[i].close(t)
	}
	if c.control != nil {
		c.control.close(t)
	}
}
