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
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/uuid"
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
	bin    string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

func startKubeControllers(opt Options, bin string) (running, error) {
	if opt.Datastore != Etcd {
		return nil, errors.New("kube-controllers: only the etcdv3 datastore is set up here")
	}
	if err := writeEtcdConfig(opt); err != nil {
		return nil, err
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

// Stop signals the whole process group (the wrapper and its child).
func (k *kubeControllers) Stop() error {
	pgid := k.cmd.Process.Pid
	select {
	case <-k.exited:
		return nil
	default:
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-k.exited:
	case <-time.After(stopTimeout):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-k.exited
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // the child, should it outlive the wrapper
	return nil
}

// writeEtcdConfig writes the KubeControllersConfiguration "default" as
// Calico's etcd backend stores a v3 resource, with the test's leak grace
// period. It also turns off what the suites do not want from the real
// controller: label sync (it rewrites Calico's Nodes), automatic host
// endpoints, and the periodic compaction of the shared etcd.
func writeEtcdConfig(opt Options) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: opt.EtcdEndpoints, DialTimeout: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("kube-controllers: etcd: %w", err)
	}
	defer cli.Close()
	data, err := json.Marshal(controllersConfig(opt.LeakGrace))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, resourcePrefix+"kubecontrollersconfigurations/default", string(data)); err != nil {
		return fmt.Errorf("kube-controllers: writing its configuration: %w", err)
	}
	return nil
}

// controllersConfig is the KubeControllersConfiguration "default" with
// Calico's defaults but for the leak grace period and the three settings
// writeEtcdConfig names.
func controllersConfig(grace time.Duration) map[string]any {
	return map[string]any{
		"kind":       "KubeControllersConfiguration",
		"apiVersion": "projectcalico.org/v3",
		"metadata":   map[string]any{"name": "default", "uid": string(uuid.NewUUID()), "creationTimestamp": time.Now().UTC().Format(time.RFC3339)},
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
