package scale

import (
	"fmt"
	"os"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Commands are the DaemonSet's command lines as deploy/safe-ipam.yaml
// writes them: the install init container, the watch and its readiness
// probe, and gc.
type Commands struct {
	Install, Watch, Probe, GC []string
}

// ReadManifest reads the DaemonSet's commands from the manifest at path.
func ReadManifest(path string) (Commands, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Commands{}, err
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		return Commands{}, fmt.Errorf("%s: %w", path, err)
	}
	spec := ds.Spec.Template.Spec
	byName := map[string]corev1.Container{}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		byName[c.Name] = c
	}
	watch := byName["watch"]
	if len(spec.InitContainers) != 1 || watch.ReadinessProbe == nil || watch.ReadinessProbe.Exec == nil || len(byName["gc"].Command) == 0 {
		return Commands{}, fmt.Errorf("%s: want an install init container, a watch with an exec readiness probe, and gc", path)
	}
	return Commands{Install: spec.InitContainers[0].Command, Watch: watch.Command, Probe: watch.ReadinessProbe.Exec.Command, GC: byName["gc"].Command}, nil
}

// Rewrite is a command line with only what differs on a simulated node
// changed: paths (each old prefix to its new one), ports and periods
// (a flag's whole value).
type Rewrite struct {
	Paths map[string]string
	Flags map[string]string // "--every" -> "2s"
}

// Apply rewrites cmd.
func (r Rewrite) Apply(cmd []string) []string {
	out := make([]string, len(cmd))
	for i, arg := range cmd {
		if name, _, ok := strings.Cut(arg, "="); ok {
			if v, ok := r.Flags[name]; ok {
				out[i] = name + "=" + v
				continue
			}
		}
		out[i] = r.rewritePaths(arg)
	}
	return out
}

func (r Rewrite) rewritePaths(arg string) string {
	best := ""
	for old := range r.Paths {
		if strings.Contains(arg, old) && len(old) > len(best) {
			best = old
		}
	}
	if best == "" {
		return arg
	}
	return strings.Replace(arg, best, r.Paths[best], 1)
}
