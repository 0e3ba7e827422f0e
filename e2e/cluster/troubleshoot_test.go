package cluster

import (
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
	// each `kubectl ... exec "$pod" -c CONTAINER -- COMMAND`.
	podLine  = regexp.MustCompile(`(?m)^pod=\$\(kubectl -n (\S+) get pods -l (\S+) --field-selector (\S+) -o name\)$`)
	execLine = regexp.MustCompile(`(?m)^kubectl -n (\S+) exec "\$pod" -c (\S+) -- (.+)$`)
)

// documentedExec is one exec line of docs/troubleshooting.md: the command
// an operator runs in a container of the node's safe-ipam pod.
type documentedExec struct {
	namespace, container string
	command              []string
}

// troubleshootOn runs docs/troubleshooting.md's lines for a DaemonSet
// node on n, and returns each command's exit code by its verb ("doctor").
// The pod is found through the API
// server with the line's own selectors; each command runs in its container
// through n's runtime (CRI ExecSync), which is what `kubectl exec` has the
// kubelet ask for: the suite's API server cannot reach its kubelets.
func (c *cluster) troubleshootOn(ctx context.Context, n *kubenode.Node) map[string]int32 {
	c.t.Helper()
	doc, err := os.ReadFile(troubleshooting)
	if err != nil {
		c.t.Fatal(err)
	}
	find := podLine.FindSubmatch(doc)
	if find == nil {
		c.t.Fatalf("%s has no line finding the node's pod (%s)", troubleshooting, podLine)
	}
	pods, err := c.kube.CoreV1().Pods(string(find[1])).List(ctx, metav1.ListOptions{LabelSelector: string(find[2]),
		FieldSelector: strings.ReplaceAll(string(find[3]), "NODE", n.Name)})
	if err != nil || len(pods.Items) != 1 {
		c.t.Fatalf("%s's pod on %s: %v %v", troubleshooting, n.Name, pods, err)
	}
	pod := pods.Items[0]
	kube, err := containerd.NewKubelet(n.Containerd.Endpoint(), n.Path("/var/log/pods"))
	if err != nil {
		c.t.Fatal(err)
	}
	defer kube.Close()
	codes := map[string]int32{}
	for _, e := range documentedExecs(doc) {
		if e.namespace != pod.Namespace {
			c.t.Fatalf("%s execs in namespace %s, its pod is in %s", troubleshooting, e.namespace, pod.Namespace)
		}
		code, out, err := kube.ExecSync(ctx, pod.Namespace, pod.Name, e.container, e.command, 60*time.Second)
		if err != nil {
			c.t.Fatalf("%s's %v in %s: %v", troubleshooting, e.command, e.container, err)
		}
		c.t.Logf("in %s of %s: %s exits %d:\n%s", e.container, pod.Name, strings.Join(e.command, " "), code, out)
		codes[e.command[1]] = code
	}
	if len(codes) == 0 {
		c.t.Fatalf("%s has no exec line (%s)", troubleshooting, execLine)
	}
	return codes
}

func documentedExecs(doc []byte) []documentedExec {
	var out []documentedExec
	for _, m := range execLine.FindAllSubmatch(doc, -1) {
		out = append(out, documentedExec{namespace: string(m[1]), container: string(m[2]),
			command: strings.Fields(string(m[3]))})
		if len(out[len(out)-1].command) < 2 {
			panic("an exec line of " + troubleshooting + " names no verb: " + string(m[0]))
		}
	}
	return out
}
