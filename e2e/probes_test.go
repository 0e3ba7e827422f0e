package e2e

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
)

// Issue 44, item 5: the probes follow the watch wherever its metrics go.
// With --metrics-addr moved off 127.0.0.1, as the manifest's comment
// invites for scraping from outside, the manifest's own liveness and
// readiness probes still answer: they ask the probe socket, not the
// metrics port (they asked 127.0.0.1:9253, failed, and the kubelet
// restarted the watch for ever).
func TestProbesFollowTheMetricsAddress(t *testing.T) {
	ctx := testContext(t)
	c := newCluster(t, "probes")
	dumpOnFailure(t, c)
	n, _ := nodeWithStore(t, ctx, c, false)
	n.admin(t, 0, "install")
	var watch *corev1.Container
	containers := daemonSetManifest(t).Spec.Template.Spec.Containers
	for i := range containers {
		if containers[i].Name == "watch" {
			watch = &containers[i]
		}
	}
	if watch == nil || watch.ReadinessProbe == nil || watch.LivenessProbe == nil {
		t.Fatal("deploy/safe-ipam.yaml has no watch container with both probes")
	}
	ln, err := net.Listen("tcp", "127.0.0.2:0") // not the loopback address the manifest names
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()
	sockets := t.TempDir()
	local := func(args []string) []string {
		out := []string{n.safeIPAM}
		for _, a := range args[1:] {
			switch {
			case strings.HasPrefix(a, "--metrics-addr="):
				a = "--metrics-addr=" + metricsAddr
			case strings.HasPrefix(a, "--cni-bin-dir="):
				a = "--cni-bin-dir=" + n.BinDir
			case strings.HasPrefix(a, "--cni-conf-dir="):
				a = "--cni-conf-dir=" + n.ConfDir
			}
			out = append(out, strings.ReplaceAll(a, "/run/safe-ipam/", sockets+"/"))
		}
		return out
	}
	args := local(watch.Command)
	cmd := exec.Command(args[0], args[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	probe := func(p *corev1.Probe) (string, error) {
		args := local(p.Exec.Command)
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		return string(out), err
	}
	bound := install.CheckEvery + time.Minute
	for end := time.Now().Add(bound); ; time.Sleep(time.Second) {
		readyOut, readyErr := probe(watch.ReadinessProbe)
		aliveOut, aliveErr := probe(watch.LivenessProbe)
		if readyErr == nil && aliveErr == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("with --metrics-addr=%s, after %s: readiness probe %v %s; liveness probe %v %s", metricsAddr, bound, readyErr, readyOut, aliveErr, aliveOut)
		}
	}
}
