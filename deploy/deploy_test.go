// Package deploy_test checks the manifests in deploy/ by decoding them
// into the typed Kubernetes API objects, strictly (an unknown field is a
// typo), and asserting what makes them work: where they run, what they
// mount, what they run, and how little privilege they have.
package deploy_test

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/safe-ipam/safe-ipam/e2e/harness/testbed"
	"github.com/safe-ipam/safe-ipam/ipam/about"
	"github.com/safe-ipam/safe-ipam/ipam/admin/install"
	"github.com/safe-ipam/safe-ipam/ipam/config"
)

func decodeStrict(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s does not decode strictly: %v", path, err)
	}
}

func daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	decodeStrict(t, "safe-ipam.yaml", &ds)
	if ds.APIVersion != "apps/v1" || ds.Kind != "DaemonSet" || ds.Namespace != "kube-system" {
		t.Fatalf("%s/%s in %q; want an apps/v1 DaemonSet in kube-system", ds.APIVersion, ds.Kind, ds.Namespace)
	}
	return &ds
}

// calicoNode is calico-node's DaemonSet from Calico's own manifest.
func calicoNode(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	path := testbed.ManifestPath()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var ds appsv1.DaemonSet
		if yaml.Unmarshal(doc, &ds) == nil && ds.Kind == "DaemonSet" && ds.Name == "calico-node" {
			return &ds
		}
	}
	t.Fatalf("%s has no calico-node DaemonSet", path)
	return nil
}

func TestDaemonSetRunsWhereCalicoNodeRuns(t *testing.T) {
	ours, theirs := daemonSet(t).Spec.Template.Spec, calicoNode(t).Spec.Template.Spec
	for _, tol := range theirs.Tolerations {
		if !slices.ContainsFunc(ours.Tolerations, func(o corev1.Toleration) bool { return reflect.DeepEqual(o, tol) }) {
			t.Errorf("calico-node tolerates %+v and safe-ipam does not", tol)
		}
	}
	for k, v := range ours.NodeSelector {
		if theirs.NodeSelector[k] != v {
			t.Errorf("nodeSelector %s=%s keeps safe-ipam off nodes calico-node runs on", k, v)
		}
	}
	if ours.PriorityClassName != theirs.PriorityClassName {
		t.Errorf("priority class %q, calico-node's is %q", ours.PriorityClassName, theirs.PriorityClassName)
	}
}

func TestDaemonSetInstallsWatchesAndProbes(t *testing.T) {
	spec := daemonSet(t).Spec.Template.Spec
	if len(spec.InitContainers) != 1 || len(spec.Containers) != 2 {
		t.Fatalf("%d init containers, %d containers; want install, then watch and gc", len(spec.InitContainers), len(spec.Containers))
	}
	init, watch := spec.InitContainers[0], container(t, spec, "watch")
	if args := strings.Join(init.Command, " "); !strings.Contains(args, "safe-ipam install ") || strings.Contains(args, "--watch") {
		t.Errorf("init container runs %q; want a one-shot safe-ipam install", args)
	}
	if args := strings.Join(watch.Command, " "); !strings.Contains(args, "safe-ipam install --watch") {
		t.Errorf("container runs %q; want safe-ipam install --watch", args)
	}
	if modeOf(init.Command) != modeOf(watch.Command) {
		t.Errorf("init container installs %q, the watch keeps %q", modeOf(init.Command), modeOf(watch.Command))
	}
	probe := watch.ReadinessProbe
	if probe == nil || probe.Exec == nil || !strings.Contains(strings.Join(probe.Exec.Command, " "), "safe-ipam doctor") {
		t.Fatalf("readiness probe %+v; want safe-ipam doctor", probe)
	}
	if probe.TimeoutSeconds < 5 {
		t.Errorf("probe timeout %ds is shorter than doctor's etcd check may take", probe.TimeoutSeconds)
	}
	for _, c := range []corev1.Container{init, watch} {
		for _, dirs := range [][2]string{{"--cni-bin-dir=", install.DefaultBinDir}, {"--cni-conf-dir=", install.DefaultConfDir}} {
			if !slices.Contains(c.Command, dirs[0]+dirs[1]) {
				t.Errorf("%s does not pass %s%s", c.Name, dirs[0], dirs[1])
			}
		}
	}
	if !slices.Contains(probe.Exec.Command, "--cni-bin-dir="+install.DefaultBinDir) {
		t.Error("the probe looks at another bin dir than the install")
	}
}

func modeOf(cmd []string) string {
	for _, a := range cmd {
		if m, ok := strings.CutPrefix(a, "--mode="); ok {
			return m
		}
	}
	return ""
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// flagValue is the value of --name=value in cmd.
func flagValue(cmd []string, name string) string {
	for _, a := range cmd {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// The gc container collects, as no runtime sends CNI GC (issue 19, item
// 5): this node's records by the CRI, the records of dead nodes, applied,
// on a period; its socket, conf and delegate are where it mounts them.
// e2e/runtime runs this very command against a real containerd.
func TestDaemonSetCollects(t *testing.T) {
	spec := daemonSet(t).Spec.Template.Spec
	gc := container(t, spec, "gc")
	cmd := gc.Command
	if len(cmd) < 2 || !strings.HasSuffix(cmd[0], "/safe-ipam") || cmd[1] != "gc" {
		t.Fatalf("gc container runs %q; want safe-ipam gc", cmd)
	}
	for _, want := range []string{"--apply", "--dead-nodes"} {
		if !slices.Contains(cmd, want) {
			t.Errorf("gc container does not pass %s: %q", want, cmd)
		}
	}
	if flagValue(cmd, "every") == "" {
		t.Errorf("gc container runs once: %q; want --every", cmd)
	}
	mounts := map[string]bool{}
	for _, m := range gc.VolumeMounts {
		mounts[m.MountPath] = true
	}
	socket, ok := strings.CutPrefix(flagValue(cmd, "cri-endpoint"), "unix://")
	if !ok || !mounts[filepath.Dir(socket)] {
		t.Errorf("--cri-endpoint %q is not a unix socket in a mounted dir %v", flagValue(cmd, "cri-endpoint"), mounts)
	}
	if conf := flagValue(cmd, "conf"); filepath.Dir(conf) != install.DefaultConfDir || !mounts[install.DefaultConfDir] {
		t.Errorf("--conf %q is not in the mounted conf dir", conf)
	}
	if flagValue(cmd, "cni-bin-dir") != install.DefaultBinDir || !mounts[install.DefaultBinDir] {
		t.Errorf("--cni-bin-dir %q is not the mounted bin dir", flagValue(cmd, "cni-bin-dir"))
	}
}

// The host's dirs are mounted at their own paths in every container, so
// the paths in Calico's config mean the same inside. Install and watch
// write the CNI dirs; gc only reads them.
func TestDaemonSetMountsHostDirsAtTheirPaths(t *testing.T) {
	spec := daemonSet(t).Spec.Template.Spec
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.Name == probeSockets && v.EmptyDir != nil {
			continue // the pod's own, not the host's
		}
		if v.HostPath == nil {
			t.Errorf("volume %s is not a hostPath", v.Name)
			continue
		}
		hostPaths[v.Name] = v.HostPath.Path
	}
	// path: writable. Issue 20, finding 7: only what a container writes
	// is writable. Own-conflist writes the bin dir (safe-ipam) and the
	// conf dir (its own config) alone (doctor opens the store read-only);
	// gc writes the store alone; nodename is only read.
	installs := map[string]bool{install.DefaultBinDir: true, install.DefaultConfDir: true, config.DefaultStoreDir: false, "/var/lib/calico": false}
	// gc's DELs through calico-ipam take its host-wide lock, as the
	// runtime's do: the lock file alone (issue 33, finding 6: the
	// directory holds calico-node's BIRD control sockets too).
	collects := map[string]bool{install.DefaultBinDir: false, install.DefaultConfDir: false, config.DefaultStoreDir: true, "/var/lib/calico": false, "/run/containerd": false, "/var/run/calico/ipam.lock": true}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		need := installs
		if c.Name == "gc" {
			need = collects
		}
		mounted := map[string]corev1.VolumeMount{}
		for _, m := range c.VolumeMounts {
			if m.Name != probeSockets && hostPaths[m.Name] != m.MountPath {
				t.Errorf("%s mounts host %s at %s", c.Name, hostPaths[m.Name], m.MountPath)
			}
			mounted[m.MountPath] = m
		}
		for path, writable := range need {
			m, ok := mounted[path]
			if !ok || m.ReadOnly == writable {
				t.Errorf("%s: %s mounted %v read-only %v; want writable %v", c.Name, path, ok, m.ReadOnly, writable)
			}
		}
	}
}

func TestDaemonSetLeastPrivilege(t *testing.T) {
	spec := daemonSet(t).Spec.Template.Spec
	if spec.HostPID || spec.HostIPC {
		t.Error("hostPID or hostIPC: not needed")
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("a service account token is mounted; safe-ipam needs no API access")
	}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Fatalf("%s has no securityContext", c.Name)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("%s is privileged", c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s allows privilege escalation", c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s has a writable root filesystem", c.Name)
		case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
			t.Errorf("%s capabilities %+v; want all dropped, none added", c.Name, sc.Capabilities)
		}
	}
}

// The patch's network config, rendered as calico-node's installer
// renders it, is Calico's own with only the IPAM routed through
// safe-ipam: the conflist mode's rewrite, done by Calico.
func TestCalicoConfigPatchIsCalicosWithSafeIPAM(t *testing.T) {
	var cm corev1.ConfigMap
	decodeStrict(t, "calico-config-conflist.patch.yaml", &cm)
	if cm.Name != "calico-config" || cm.Namespace != "kube-system" || len(cm.Data) != 1 {
		t.Fatalf("%s/%s with keys %d; want calico-config in kube-system with only cni_network_config", cm.Namespace, cm.Name, len(cm.Data))
	}
	tpl, err := testbed.CalicoNetworkTemplate()
	if err != nil {
		t.Fatal(err)
	}
	values := testbed.CalicoDefaults("http://10.0.0.10:2379")
	ours, err := testbed.RenderCalicoNetwork(cm.Data["cni_network_config"], values)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := testbed.RenderCalicoNetwork(tpl, values)
	if err != nil {
		t.Fatal(err)
	}
	routed := bytes.Replace(theirs, []byte(`"type": "calico-ipam"`), []byte(`"type": "safe-ipam", "delegate": {"type": "calico-ipam"}`), 1)
	var a, b any
	if json.Unmarshal(ours, &a) != nil || json.Unmarshal(routed, &b) != nil || !reflect.DeepEqual(a, b) {
		t.Errorf("the patch's config is not Calico's with its IPAM routed through safe-ipam:\n%s\nwant (as JSON):\n%s", ours, routed)
	}
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/10-calico.conflist", ours, 0o600); err != nil {
		t.Fatal(err)
	}
	conf := cninode.ReadConf(dir + "/10-calico.conflist")
	stdin, err := conf.PluginConfig(0)
	if err != nil || !conf.Plugins[0].RoutedThroughSafeIPAM() {
		t.Fatalf("plugin 0 not routed through safe-ipam: %+v, %v", conf.Plugins, err)
	}
	if _, err := config.Parse(stdin); err != nil {
		t.Errorf("safe-ipam refuses the rendered config: %v", err)
	}
}

// Issue 20, finding 7: the ClusterRole grants exactly the verbs the code
// calls (client-go and dynamic-client calls in ipam/admin/liveness and
// ipam/calico/datastore), each for the reason given.
func TestRBACGrantsOnlyWhatTheCodeCalls(t *testing.T) {
	var role rbacv1.ClusterRole
	decodeStrict(t, "safe-ipam-rbac.yaml", &role)
	want := map[string][]string{
		"/pods":                                 {"list"},                                      // liveness: the node's pods
		"/nodes":                                {"get"},                                       // liveness: the node is Ready; dead nodes
		"crd.projectcalico.org/ipamblocks":      {"delete", "get", "list", "update"},           // audit; repair frees; finish Calico's delete
		"crd.projectcalico.org/blockaffinities": {"list"},                                      // audit
		"crd.projectcalico.org/ipamhandles":     {"create", "delete", "get", "list", "update"}, // audit; repair re-claims and releases
	}
	got := map[string][]string{}
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				got[g+"/"+res] = append(got[g+"/"+res], r.Verbs...)
			}
		}
	}
	for k := range got {
		slices.Sort(got[k])
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ClusterRole grants %v; want exactly %v", got, want)
	}
}

// Every container runs the image `make image` builds, by its pinned tag
// (never :latest, which a node would not pull again).
func TestDaemonSetPinsTheImage(t *testing.T) {
	spec := daemonSet(t).Spec.Template.Spec
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		if c.Image != about.Image {
			t.Errorf("container %s runs %q; want %q (about.Image, what make image tags)", c.Name, c.Image, about.Image)
		}
	}
}

// The cluster uninstall manifest runs `safe-ipam uninstall` where the
// DaemonSet installs, on the same nodes, with the same dirs at their
// paths: the bin dir and the file store writable, Calico's config
// read-only; its waiting container has no mount and no privilege.
func TestUninstallManifest(t *testing.T) {
	var un appsv1.DaemonSet
	decodeStrict(t, "safe-ipam-uninstall.yaml", &un)
	ds := daemonSet(t)
	spec, inst := un.Spec.Template.Spec, ds.Spec.Template.Spec
	if un.Namespace != ds.Namespace || !reflect.DeepEqual(spec.Tolerations, inst.Tolerations) ||
		!reflect.DeepEqual(spec.NodeSelector, inst.NodeSelector) || spec.HostNetwork != inst.HostNetwork {
		t.Error("the uninstall DaemonSet does not run where safe-ipam's does")
	}
	if len(spec.InitContainers) != 1 || len(spec.Containers) != 1 {
		t.Fatalf("%d init containers and %d containers; want one uninstall and one that waits", len(spec.InitContainers), len(spec.Containers))
	}
	un0, in0 := spec.InitContainers[0], inst.InitContainers[0]
	want := []string{"/usr/local/bin/safe-ipam", "uninstall", "--cni-bin-dir=" + flagValue(in0.Command, "cni-bin-dir"), "--cni-conf-dir=" + flagValue(in0.Command, "cni-conf-dir")}
	if !slices.Equal(un0.Command, want) || un0.Image != about.Image {
		t.Errorf("uninstall runs %q in %s; want %q in %s", un0.Command, un0.Image, want, about.Image)
	}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		hostPaths[v.Name] = v.HostPath.Path
	}
	writable := map[string]bool{install.DefaultBinDir: true, install.DefaultConfDir: true, config.DefaultStoreDir: true, "/var/lib/calico": false, "/var/run/calico/ipam.lock": true}
	for _, m := range un0.VolumeMounts {
		if hostPaths[m.Name] != m.MountPath {
			t.Errorf("uninstall mounts host %s at %s", hostPaths[m.Name], m.MountPath)
		}
		if w, ok := writable[m.MountPath]; !ok || w == m.ReadOnly {
			t.Errorf("uninstall mounts %s read-only %v", m.MountPath, m.ReadOnly)
		}
		delete(writable, m.MountPath)
	}
	if len(writable) > 0 {
		t.Errorf("uninstall does not mount %v", writable)
	}
	wait := spec.Containers[0]
	if len(wait.VolumeMounts) > 0 || len(wait.Command) > 0 || wait.SecurityContext == nil || wait.SecurityContext.RunAsNonRoot == nil || !*wait.SecurityContext.RunAsNonRoot {
		t.Errorf("the waiting container %+v mounts, runs or may more than it needs", wait)
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("a service account token is mounted; uninstall needs no API access")
	}
}

// probeSockets is the pod's emptyDir for the probe sockets.
const probeSockets = "probe-sockets"

// The two long-running containers serve metrics on a port they declare.
// Issue 42, item 5: their probes ask the probe socket (--probe-socket),
// in the pod's own emptyDir, which no other process on the node reaches:
// a flood of connections to the loopback port fails no probe.
func TestDaemonSetServesMetricsAndLiveness(t *testing.T) {
	spec := daemonSet(t).Spec.Template.Spec
	ports := map[int32]string{}
	for _, name := range []string{"watch", "gc"} {
		c := container(t, spec, name)
		addr := flagValue(c.Command, "metrics-addr")
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Errorf("%s serves no metrics (--metrics-addr %q)", name, addr)
			continue
		}
		p, _ := strconv.Atoi(port)
		if len(c.Ports) != 1 || c.Ports[0].ContainerPort != int32(p) {
			t.Errorf("%s declares ports %+v; want %d", name, c.Ports, p)
		}
		if other, dup := ports[int32(p)]; dup {
			t.Errorf("%s and %s both take port %d of the node", name, other, p)
		}
		ports[int32(p)] = name
		socket := flagValue(c.Command, "probe-socket")
		mounted := false
		for _, m := range c.VolumeMounts {
			mounted = mounted || m.Name == probeSockets && !m.ReadOnly && m.MountPath == filepath.Dir(socket)
		}
		if socket == "" || !mounted {
			t.Errorf("%s serves its probes at --probe-socket %q, mounted from the %s emptyDir %v; want both", name, socket, probeSockets, mounted)
		}
		probes := map[string]*corev1.Probe{"alive": c.LivenessProbe}
		if name == "watch" {
			probes["ready"] = c.ReadinessProbe
		}
		for what, p := range probes {
			if p == nil || p.Exec == nil || flagValue(p.Exec.Command, what+"-from") != "unix:"+socket {
				t.Errorf("%s's %s probe %+v; want doctor --%s-from=unix:%s", name, what, p, what, socket)
			}
		}
	}
	for _, v := range spec.Volumes {
		if v.Name == probeSockets && (v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory) {
			t.Errorf("volume %s %+v; want an emptyDir in memory", probeSockets, v)
		}
	}
}

// Issue 33, finding 1: the metrics and health endpoints listen on the
// node's loopback only (hostNetwork puts any other address within every
// pod's reach).
func TestDaemonSetServesMetricsOnLoopback(t *testing.T) {
	spec := daemonSet(t).Spec.Template.Spec
	for _, name := range []string{"watch", "gc"} {
		c := container(t, spec, name)
		host, _, err := net.SplitHostPort(flagValue(c.Command, "metrics-addr"))
		if err != nil || host != "127.0.0.1" {
			t.Errorf("%s serves metrics at %q; want the node's loopback, 127.0.0.1", name, flagValue(c.Command, "metrics-addr"))
		}
	}
}

// Issue 30, item 1: the revert of the conflist patch is Calico's own
// cni_network_config, byte for byte, so that calico-node renders a config
// naming calico-ipam again before safe-ipam is uninstalled.
func TestCalicoConfigRevertIsCalicos(t *testing.T) {
	var cm corev1.ConfigMap
	decodeStrict(t, "calico-config-conflist.revert.yaml", &cm)
	if cm.Name != "calico-config" || cm.Namespace != "kube-system" || len(cm.Data) != 1 {
		t.Fatalf("%s/%s with keys %d; want calico-config in kube-system with only cni_network_config", cm.Namespace, cm.Name, len(cm.Data))
	}
	tpl, err := testbed.CalicoNetworkTemplate()
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["cni_network_config"] != tpl {
		t.Errorf("the revert's cni_network_config is not Calico's:\n%s\nwant:\n%s", cm.Data["cni_network_config"], tpl)
	}
}

// docs/security.md, "The Pod Security restricted profile": what both
// DaemonSets meet, and the exceptions they take, as the table says. Every
// container drops every capability, may not escalate, has a read-only
// root filesystem and is not privileged; the pod runs the runtime's
// default seccomp profile, on the host's network only, with no hostPID,
// hostIPC, AppArmor, SELinux, sysctl or /proc mount setting; the
// containers run as root, but the uninstall DaemonSet's waiting one as
// uid 65535.
func TestBothDaemonSetsMeetTheirPodSecurityTable(t *testing.T) {
	var un appsv1.DaemonSet
	decodeStrict(t, "safe-ipam-uninstall.yaml", &un)
	for name, spec := range map[string]corev1.PodSpec{"safe-ipam.yaml": daemonSet(t).Spec.Template.Spec, "safe-ipam-uninstall.yaml": un.Spec.Template.Spec} {
		psc := spec.SecurityContext
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod seccomp %+v; want RuntimeDefault", name, psc)
		}
		if psc != nil && (psc.SELinuxOptions != nil || psc.AppArmorProfile != nil || len(psc.Sysctls) > 0) {
			t.Errorf("%s: pod sets SELinux, AppArmor or sysctls: %+v", name, psc)
		}
		if !spec.HostNetwork || spec.HostPID || spec.HostIPC {
			t.Errorf("%s: hostNetwork %v hostPID %v hostIPC %v; want the network only", name, spec.HostNetwork, spec.HostPID, spec.HostIPC)
		}
		for _, c := range append(spec.InitContainers, spec.Containers...) {
			sc := c.SecurityContext
			if sc == nil {
				t.Errorf("%s: %s has no securityContext", name, c.Name)
				continue
			}
			wantUID := int64(0)
			if name == "safe-ipam-uninstall.yaml" && len(c.Command) == 0 {
				wantUID = 65535 // the waiting container
			}
			switch {
			case sc.RunAsUser == nil || *sc.RunAsUser != wantUID:
				t.Errorf("%s: %s runs as %v; want uid %d", name, c.Name, sc.RunAsUser, wantUID)
			case sc.Privileged != nil && *sc.Privileged, sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
				t.Errorf("%s: %s is privileged or may escalate", name, c.Name)
			case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
				t.Errorf("%s: %s has a writable root filesystem", name, c.Name)
			case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
				t.Errorf("%s: %s capabilities %+v; want all dropped, none added", name, c.Name, sc.Capabilities)
			case sc.SELinuxOptions != nil || sc.AppArmorProfile != nil || sc.ProcMount != nil || sc.WindowsOptions != nil:
				t.Errorf("%s: %s sets SELinux, AppArmor, a /proc mount or Windows options", name, c.Name)
			}
		}
	}
}
