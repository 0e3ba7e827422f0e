package releaser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/calicosim"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

const (
	// readyTimeout bounds kube-controllers' start: datastore checks, its
	// configuration, and the first sync of Calico's data.
	readyTimeout = 90 * time.Second
	// inSync is what kube-controllers logs once its IPAM controller has
	// Calico's data; from then on it acts on what it sees.
	inSync = "Syncer is InSync"
	// stopTimeout is how long SIGTERM gets before SIGKILL.
	stopTimeout = 10 * time.Second
)

// kubeControllers is Calico's real kube-controllers, running only its node
// controller, in its own process group (it re-executes itself as a child).
type kubeControllers struct {
	bin     string
	cmd     *exec.Cmd
	log     string
	exited  chan struct{}
	stopped sync.Once
}

func startKubeControllers(opt Options, bin string) (running, error) {
	write := writeEtcdConfig
	if opt.Datastore == Kubernetes {
		write = writeKubeConfig
	}
	if err := write(opt); err != nil {
		return nil, fmt.Errorf("kube-controllers: writing its configuration: %w", err)
	}
	logPath := filepath.Join(opt.Dir, "kube-controllers.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "--status-file", filepath.Join(opt.Dir, "kube-controllers-status.json"))
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"DATASTORE_TYPE=" + opt.Datastore,
		"ETCD_ENDPOINTS=" + strings.Join(opt.EtcdEndpoints, ","),
		"KUBECONFIG=" + opt.Kubeconfig,
		"ENABLED_CONTROLLERS=node",
		"LOG_LEVEL=info",
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("kube-controllers: start %s: %w", bin, err)
	}
	k := &kubeControllers{bin: bin, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(k.exited) }()
	if err := k.waitInSync(); err != nil {
		return nil, errors.Join(err, k.Stop())
	}
	return k, nil
}

func (k *kubeControllers) Name() string    { return "kube-controllers " + k.bin }
func (k *kubeControllers) logPath() string { return k.log }

// waitInSync waits for the IPAM controller's first sync.
func (k *kubeControllers) waitInSync() error {
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-k.exited:
			return fmt.Errorf("kube-controllers exited: %v; log %s ends:\n%s", k.cmd.ProcessState, k.log, tail(k.log))
		case <-time.After(200 * time.Millisecond):
		}
		if data, err := os.ReadFile(k.log); err == nil && bytes.Contains(data, []byte(inSync)) {
			return nil
		}
	}
	return fmt.Errorf("kube-controllers not in sync after %s; log %s ends:\n%s", readyTimeout, k.log, tail(k.log))
}

// Stop signals the whole process group (the wrapper and its child, which
// dies with the wrapper): TERM, then KILL after stopTimeout. Only a group
// whose leader has not been reaped is signalled, so a reused process id
// is never hit; a second Stop does nothing.
func (k *kubeControllers) Stop() error {
	k.stopped.Do(func() {
		pgid := k.cmd.Process.Pid
		select {
		case <-k.exited:
			return
		default:
		}
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-k.exited:
		case <-time.After(stopTimeout):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-k.exited
		}
	})
	return nil
}

// writeEtcdConfig writes the KubeControllersConfiguration "default" as
// Calico's etcd backend stores a v3 resource (see controllersConfig).
func writeEtcdConfig(opt Options) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: opt.EtcdEndpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	cfg := controllersConfig(opt.LeakGrace)
	cfg["apiVersion"] = calico.APIVersion
	cfg["metadata"] = map[string]any{"name": "default", "uid": string(uuid.NewUUID()), "creationTimestamp": time.Now().UTC().Format(time.RFC3339)}
	data, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = cli.Put(ctx, resourcePrefix+"kubecontrollersconfigurations/default", string(data))
	return err
}

// writeKubeConfig installs the CRDs kube-controllers needs (calicodata's
// IPAM and kube-controllers ones; existing ones stay) and writes
// the KubeControllersConfiguration "default" as a crd.projectcalico.org/v1
// object, replacing one left by an earlier run.
func writeKubeConfig(opt Options) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", opt.Kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, crds := range []string{calicodata.Path(calicodata.CRDs), calicodata.Path(calicodata.KubeControllersCRDs)} {
		if err := calicosim.InstallKubeCRDs(ctx, cfg, crds); err != nil {
			return err
		}
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: controllersConfig(opt.LeakGrace)}
	obj.SetAPIVersion(calico.KDDAPIVersion)
	obj.SetName("default")
	r := dyn.Resource(schema.GroupVersionResource{Group: calico.KDDGroup, Version: calico.KDDVersion, Resource: "kubecontrollersconfigurations"})
	if err := r.Delete(ctx, "default", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	_, err = r.Create(ctx, obj, metav1.CreateOptions{})
	return err
}

// controllersConfig is the KubeControllersConfiguration "default" (kind,
// spec and status) with Calico's defaults but for the test's leak grace
// period, and with what the suites do not want from the real controller
// turned off: label sync (it rewrites Calico's Nodes), automatic host
// endpoints, the periodic compaction of the shared etcd, and the policy
// name migrator (which waits for calico-node's DaemonSet before it reads
// the data feed, and so holds up the node controller's).
func controllersConfig(grace time.Duration) map[string]any {
	return map[string]any{
		"kind": "KubeControllersConfiguration",
		"spec": map[string]any{
			"logSeverityScreen":      "Info",
			"healthChecks":           "Enabled",
			"etcdV3CompactionPeriod": "0s",
			"controllers": map[string]any{
				"node": map[string]any{
					"reconcilerPeriod": "5m0s",
					"syncLabels":       "Disabled",
					"hostEndpoint":     map[string]any{"autoCreate": "Disabled"},
					"leakGracePeriod":  grace.String(),
				},
				"migration": map[string]any{"policyNameMigrator": "Disabled"},
			},
		},
		"status": map[string]any{},
	}
}
