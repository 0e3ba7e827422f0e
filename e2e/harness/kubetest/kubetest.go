// Package kubetest runs a real kube-apiserver for tests: the official
// binary (built once per version by scripts/kube-apiserver.sh into a cache
// directory), against a real embedded etcd (e2e/etcdtest), on a loopback
// port, with its own serving CA, service-account key pair and an admin
// token, all generated in the test's directory. It is stopped by PID.
//
// Startup costs about 3 s and 250 MB, so a package shares one server
// (Shared) and its tests keep apart by node and namespace names.
package kubetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
)

// readyTimeout bounds the wait for /readyz: a cold machine with other
// tests running takes longer than the usual 3 s.
const readyTimeout = 90 * time.Second

// stopTimeout is how long a SIGTERM gets before SIGKILL.
const stopTimeout = 10 * time.Second

// Server is a running kube-apiserver.
type Server struct {
	// URL is https://127.0.0.1:<port>.
	URL string
	// Kubeconfig is a kubeconfig file for the admin user (system:masters).
	Kubeconfig string

	dir    string
	cafile string
	token  string
	cmd    *exec.Cmd
	exited chan struct{}
	etcd   *etcdtest.Server
	flags  []string
	log    *os.File
	admin  *kubernetes.Clientset
}

// Start runs a server for one test and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// New runs a server whose files (etcd data, keys, log) live in dir;
// flags are given to kube-apiserver after its own.
func New(dir string, flags ...string) (*Server, error) {
	return NewWith(dir, etcdtest.Options{Fast: true}, flags...)
}

// NewWith is New with the options of the etcd the server stores its
// objects in.
func NewWith(dir string, store etcdtest.Options, flags ...string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	etcd, err := etcdtest.NewWith(filepath.Join(dir, "etcd"), store)
	if err != nil {
		return nil, fmt.Errorf("kubetest: etcd: %w", err)
	}
	s := &Server{dir: dir, etcd: etcd, flags: flags}
	if err := s.start(bin); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Binary is the kube-apiserver binary: $KUBE_APISERVER, or the cached
// build of scripts/kube-apiserver.sh, built now if it is missing.
func Binary() (string, error) { return Command("kube-apiserver") }

// Command is the cached build of a Kubernetes command the script builds
// (kube-apiserver, kubelet, kube-controller-manager, kube-scheduler),
// built now if it is missing, or the binary its variable names.
func Command(name string) (string, error) {
	script := filepath.Join(repoRoot(), "scripts", "kube-apiserver.sh")
	var stderr bytes.Buffer
	cmd := exec.Command("bash", script, name)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("kubetest: %s: %w: %s", script, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// repoRoot is the repository this file is in; the script lives there.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func (s *Server) start(bin string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	files, err := writeFiles(s.dir)
	if err != nil {
		return err
	}
	s.cafile, s.token = files.caFile, files.adminToken
	s.URL = "https://127.0.0.1:" + strconv.Itoa(port)
	if s.log, err = os.Create(filepath.Join(s.dir, "kube-apiserver.log")); err != nil {
		return fmt.Errorf("kubetest: %w", err)
	}
	s.cmd = exec.Command(bin, append(serverArgs(port, s.etcd.Endpoint(), files), s.flags...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	// Dies with the test binary, even when it is killed on a timeout.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("kubetest: start %s: %w", bin, err)
	}
	s.exited = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(); err != nil {
		return fmt.Errorf("%w\n%s", err, s.logTail())
	}
	if s.Kubeconfig, err = s.writeKubeconfig("admin", s.token); err != nil {
		return err
	}
	s.admin, err = kubernetes.NewForConfig(s.Config())
	return err
}

func serverArgs(port int, etcd string, f *files) []string {
	return []string{
		"--etcd-servers=" + etcd,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + f.certFile,
		"--tls-private-key-file=" + f.keyFile,
		"--client-ca-file=" + f.caFile,
		"--token-auth-file=" + f.tokenFile,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + f.saPub,
		"--service-account-signing-key-file=" + f.saKey,
		"--service-cluster-ip-range=10.96.0.0/24",
		"--authorization-mode=RBAC",
		// Nothing here creates service accounts or maintains endpoints.
		"--disable-admission-plugins=ServiceAccount",
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--cert-dir=" + filepath.Join(filepath.Dir(f.caFile), "generated"),
	}
}

// waitReady polls /readyz until it answers ok, the process exits, or
// readyTimeout passes.
func (s *Server) waitReady() error {
	client := s.httpClient()
	deadline := time.Now().Add(readyTimeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("kubetest: kube-apiserver exited: %v", s.cmd.ProcessState)
		case <-time.After(200 * time.Millisecond):
		}
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+s.token)
		resp, err := client.Do(req)
		if err != nil {
			last = err
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		last = fmt.Errorf("/readyz: %s", resp.Status)
	}
	return fmt.Errorf("kubetest: kube-apiserver not ready after %s: %v", readyTimeout, last)
}

func (s *Server) httpClient() *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: mustPool(s.cafile)}}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.dir, "kube-apiserver.log"))
	if err != nil {
		return ""
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return "kube-apiserver log (tail):\n" + string(b)
}

// Config is a client config for the admin user.
func (s *Server) Config() *rest.Config {
	return &rest.Config{Host: s.URL, BearerToken: s.token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.cafile}}
}

// Client is a client-go clientset for the admin user.
func (s *Server) Client() kubernetes.Interface { return s.admin }

// Etcd is the etcd the server stores its objects in.
func (s *Server) Etcd() *etcdtest.Server { return s.etcd }

// Stop stops the API server by PID (SIGTERM, then SIGKILL): clients see
// connection refused, as with an API server that is down. Close still
// cleans up.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil || s.exited == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(stopTimeout):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Close stops the API server and its etcd.
func (s *Server) Close() {
	s.Stop()
	if s.log != nil {
		s.log.Close()
	}
	if s.etcd != nil {
		s.etcd.Close()
	}
}

// writeKubeconfig writes a kubeconfig for a bearer token and returns its
// path: what client-go and the admin commands' --kubeconfig read.
func (s *Server) writeKubeconfig(user, token string) (string, error) {
	cfg := clientcmdConfig(s.URL, s.cafile, user, token)
	path := filepath.Join(s.dir, "kubeconfig-"+user)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("kubetest: kubeconfig: %w", err)
	}
	return path, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("kubetest: free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Shared is one server for a whole test package, started on first use:
// a package whose other tests need no API server pays nothing. The
// package's TestMain is Main.
type Shared struct {
	once sync.Once
	dir  string
	srv  *Server
	err  error
}

// Get returns the package's server, starting it if needed.
func (sh *Shared) Get(t testing.TB) *Server {
	t.Helper()
	sh.once.Do(func() {
		sh.dir, sh.err = os.MkdirTemp("", "kubetest-")
		if sh.err == nil {
			sh.srv, sh.err = New(sh.dir)
		}
	})
	if sh.err != nil {
		t.Fatal(sh.err)
	}
	return sh.srv
}

// Close stops the server, if one was started, and removes its files.
func (sh *Shared) Close() {
	if sh.srv != nil {
		sh.srv.Close()
	}
	if sh.dir != "" {
		_ = os.RemoveAll(sh.dir)
	}
}

// Main is a package's TestMain: it runs the tests, stops the server if
// one was started (no test may leave it running), and exits with the
// tests' code.
func (sh *Shared) Main(m *testing.M) {
	code := m.Run()
	sh.Close()
	os.Exit(code)
}

var errNoToken = errors.New("kubetest: the API server issued no token")

// ctx bounds one harness call to the API server.
func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// Repoint copies kubeconfig with its cluster's server replaced by url: a
// valid identity aimed at a server that is down or never answers.
func Repoint(t testing.TB, kubeconfig, url string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = url
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// PID is the kube-apiserver's process ID.
func (s *Server) PID() int { return s.cmd.Process.Pid }
