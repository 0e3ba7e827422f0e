package cluster

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	admindetect "github.com/safe-ipam/safe-ipam/ipam/admin/detect"
	"github.com/safe-ipam/safe-ipam/ipam/detect"
)

const detectManifest = "../../deploy/safe-ipam-detect.yaml"

// The check's period and settle time, shortened for the suite (2m and
// 10s in the manifest).
const (
	detectEvery  = 10 * time.Second
	detectSettle = 2 * time.Second
)

// startDetect applies deploy/safe-ipam-detect.yaml with the period
// shortened, on Calico's Kubernetes datastore, and waits until one
// instance runs the rounds. The suite's pods cannot reach the kubernetes
// Service (no kube-proxy here), so the check's own service account is
// handed to it as a kubeconfig Secret: its RBAC is the manifest's.
func (c *cluster) startDetect(ctx context.Context) {
	c.t.Helper()
	if err := c.node.API.Apply(detectManifest); err != nil {
		c.t.Fatal(err)
	}
	kc, err := c.node.API.ServiceAccountKubeconfig("kube-system", "safe-ipam-detect")
	if err != nil {
		c.t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "safe-ipam-detect-kubeconfig", Namespace: "kube-system"}, Data: map[string][]byte{"kubeconfig": kc}}
	if _, err := c.kube.CoreV1().Secrets("kube-system").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{
		"volumes":[{"name":"kubeconfig","secret":{"secretName":"safe-ipam-detect-kubeconfig"}}],
		"containers":[{"name":"detect","command":["/usr/local/bin/safe-ipam","detect","--datastore=kubernetes","--every=%s","--settle=%s",
			"--metrics-addr=:9256","--lease=kube-system/safe-ipam-detect","--kubeconfig=/etc/safe-ipam-detect/kubeconfig"],
			"volumeMounts":[{"name":"kubeconfig","mountPath":"/etc/safe-ipam-detect","readOnly":true}]}]}}}}`, detectEvery, detectSettle)
	if _, err := c.kube.AppsV1().Deployments("kube-system").Patch(ctx, "safe-ipam-detect", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
	start := time.Now()
	for deadline := start.Add(2 * time.Minute); ; time.Sleep(time.Second) {
		if _, ok := c.detectMetrics(ctx); ok {
			c.t.Logf("safe-ipam-detect runs its rounds %s after it was applied", time.Since(start).Round(100*time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatal("no instance of safe-ipam-detect ran a round within 2 minutes")
		}
	}
}

// detectMetrics are the metrics of the instance running the rounds: the
// one node whose port 9256 serves them (the check runs on the host's
// network).
func (c *cluster) detectMetrics(ctx context.Context) (string, bool) {
	for _, n := range c.livingNodes() {
		out, err := n.Holder.Command(ctx, "curl", "-sf", "--max-time", "3", "http://127.0.0.1:9256/metrics").Output()
		if err == nil && strings.Contains(string(out), "safe_ipam_detect_rounds_total") {
			return string(out), true
		}
	}
	return "", false
}

// detectFindings is the check's count of kind, -1 when no instance
// serves it.
func (c *cluster) detectFindings(ctx context.Context, kind detect.Kind) int {
	body, ok := c.detectMetrics(ctx)
	if !ok {
		return -1
	}
	m := regexp.MustCompile(`(?m)^safe_ipam_detect_findings\{kind="` + regexp.QuoteMeta(string(kind)) + `"\} (\d+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// waitDetected waits until the check reports kind for the pod, by its
// metric and by an Event on the pod, within one period (and its settle
// time, and a round's own time) of planted, when the finding was made.
func (c *cluster) waitDetected(ctx context.Context, kind detect.Kind, pod string, planted time.Time) {
	c.t.Helper()
	bound := detectEvery + detectSettle + 10*time.Second
	for deadline := planted.Add(bound); ; time.Sleep(500 * time.Millisecond) {
		events, err := c.kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + pod + ",reason=" + admindetect.Reasons[kind]})
		if err == nil && len(events.Items) > 0 && c.detectFindings(ctx, kind) > 0 {
			c.t.Logf("%s of %s reported by metric and Event %s after it was made (period %s): %s", kind, pod, time.Since(planted).Round(100*time.Millisecond), detectEvery, events.Items[0].Message)
			return
		}
		if time.Now().After(deadline) {
			body, _ := c.detectMetrics(ctx)
			c.t.Fatalf("%s of %s not reported by metric and Event within %s: events %v (%v); metrics:\n%s", kind, pod, bound, events, err, body)
		}
	}
}

// plantAnnotationMismatch gives a running pod Calico's annotation naming
// another address than its status (issue 13858's shape), and returns when.
func (c *cluster) plantAnnotationMismatch(ctx context.Context, pod string) time.Time {
	c.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"10.255.255.1/32",%q:"10.255.255.1/32"}}}`, detect.AnnotationPodIP, detect.AnnotationPodIPs)
	if _, err := c.kube.CoreV1().Pods("default").Patch(ctx, pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
	return time.Now()
}
