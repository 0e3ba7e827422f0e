package cluster

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/safe-ipam/safe-ipam/e2e/harness/containerd"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubenode"
)

const troubleshooting = "../../docs/troubleshooting.md"

var (
	// podLine is the doc's `pod=$(kubectl ... get pods ...)` line; execLine
	// each `kubectl ... exec "$pod" -c CONTAINER -- safe-ipam VERB ...`
	// of the block it starts.
	podLine  = regexp.MustCompile(`(?m)^pod=\$\(kubectl -n (\S+) get pods -l (\S+) --field-selector (\S+) -o name\)$`)
	execLine = regexp.MustCompile(`^kubectl -n (\S+) exec "\$pod" -c (\S+) -- (/usr/local/bin/safe-ipam) (doctor|audit)( .*)?$`)
)

// documentedExec is one exec line of docs/troubleshooting.md: the command
// an operator runs in a container of the node's safe-ipam pod.
type documentedExec struct {
	namespace, container, verb string
	command                    []string
}

// troubleshootOn runs docs/troubleshooting.md's lines for a DaemonSet
// node on n, and returns each command's exit code by its verb ("doctor").
// The pod is found through the API server with the line's own selectors;
// each command runs in its container as the runtime runs it (CRI
// ExecSync; `kubectl exec` streams through the same runtime, and the
// suite's API server cannot reach its kubelets).
func (c *cluster) troubleshootOn(ctx context.Context, n *kubenode.Node) map[string]int32 {
	c.t.Helper()
	doc, err := os.ReadFile(troubleshooting)
	if err != nil {
		c.t.Fatal(err)
	}
	m := podLine.FindSubmatchIndex(doc)
	if m == nil {
		c.t.Fatalf("%s has no line finding the node's pod (%s)", troubleshooting, podLine)
	}
	group := func(i int) string { return string(doc[m[2*i]:m[2*i+1]]) }
	pods, err := c.kube.CoreV1().Pods(group(1)).List(ctx, metav1.ListOptions{LabelSelector: group(2),
		FieldSelector: strings.ReplaceAll(group(3), "NODE", n.Name)})
	if err != nil {
		c.t.Fatalf("%s's pod on %s: %v", troubleshooting, n.Name, err)
	}
	if len(pods.Items) != 1 {
		var names []string
		for _, p := range pods.Items {
			names = append(names, p.Name)
		}
		c.t.Fatalf("%s's line finds pods %v on %s, want one", troubleshooting, names, n.Name)
	}
	pod := pods.Items[0]
	cri, err := containerd.NewKubelet(n.Containerd.Endpoint(), n.Path("/var/log/pods"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer cri.Close()
	codes := map[string]int32{}
	for _, e := range c.documentedExecs(doc[m[1]:]) {
		if e.namespace != pod.Namespace {
			c.t.Fatalf("%s execs in namespace %s, its pod is in %s", troubleshooting, e.namespace, pod.Namespace)
		}
		code, out, err := cri.ExecSync(ctx, pod.Namespace, pod.Name, e.container, e.command, 60*time.Second)
		if err != nil {
			c.t.Fatalf("%s's %v in %s: %v", troubleshooting, e.command, e.container, err)
		}
		c.t.Logf("in %s of %s: %s exits %d:\n%s", e.container, pod.Name, strings.Join(e.command, " "), code, out)
		codes[e.verb] = code
	}
	return codes
}

// documentedExecs are the exec lines of the block that starts block (the
// rest of its fenced code), each a safe-ipam command that only reads.
func (c *cluster) documentedExecs(block []byte) []documentedExec {
	c.t.Helper()
	end := bytes.Index(block, []byte("\n```"))
	if end < 0 {
		c.t.Fatalf("%s: the block of kubectl lines does not end", troubleshooting)
	}
	var out []documentedExec
	for _, line := range strings.Split(strings.TrimSpace(string(block[:end])), "\n") {
		m := execLine.FindStringSubmatch(line)
		if m == nil {
			c.t.Fatalf("%s: %q is not a kubectl exec of safe-ipam doctor or audit (%s)", troubleshooting, line, execLine)
		}
		out = append(out, documentedExec{namespace: m[1], container: m[2], verb: m[4],
			command: append([]string{m[3], m[4]}, strings.Fields(m[5])...)})
	}
	return out
}
