package audit_test

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/e2e/harness/etcdtest"
	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/liveness"
	"github.com/safe-ipam/safe-ipam/ipam/calico"
)

// tlsWorld is a world whose etcd requires client certificates.
func tlsWorld(t *testing.T) *world {
	return &world{t: t, etcd: etcdtest.StartTLS(t), blocks: map[netip.Prefix]*calico.Block{}}
}

func tlsArgs(cert, key, ca string) []string {
	return []string{"--etcd-cert", cert, "--etcd-key", key, "--etcd-ca", ca}
}

// Audit and repair --apply work against an etcd that requires client
// certificates: an early release is found, re-claimed, and audits clean.
func TestAuditAndRepairOverTLS(t *testing.T) {
	w := tlsWorld(t)
	f := w.etcd.TLS
	creds := tlsArgs(f.CertFile, f.KeyFile, f.CAFile)
	early := w.allocate(blk, "node1", "net1.c2", podAttrs("web-2"))
	w.record("net1", "c2", "node1", early, "web-2")
	w.release(blk, "net1.c2")
	live := w.liveFile(liveness.Running{ContainerID: "c2", IfName: "eth0", PodNamespace: "default", PodName: "web-2"})

	code, rep, stderr := w.run(false, append(creds, "--live", live)...)
	if code != audit.ExitFindings || find(rep.Findings, audit.EarlyRelease) == nil {
		t.Fatalf("audit: exit %d, findings %+v, stderr %s", code, rep.Findings, stderr)
	}
	code, rep, stderr = w.run(true, append(creds, "--live", live, "--apply")...)
	if code != audit.ExitClean || len(rep.Actions) != 1 || rep.Actions[0].Outcome != "done" {
		t.Fatalf("repair --apply: exit %d, actions %+v, refused %+v, stderr %s", code, rep.Actions, rep.Refused, stderr)
	}
	if code, rep, stderr = w.run(false, append(creds, "--live", live)...); code != audit.ExitClean {
		t.Fatalf("audit after repair: exit %d, %+v, stderr %s", code, rep.Findings, stderr)
	}
}

// A wrong TLS file is an error (exit 2) that names the file and its flag.
func TestAuditTLSFaultsNameTheFile(t *testing.T) {
	w := tlsWorld(t)
	f := w.etcd.TLS
	missing := filepath.Join(t.TempDir(), "missing-key.pem")
	for _, tc := range []struct {
		name  string
		args  []string
		wants []string
	}{
		{"wrong CA", tlsArgs(f.CertFile, f.KeyFile, f.OtherCAFile), []string{f.OtherCAFile + " (--etcd-ca)", "not trusted"}},
		{"missing key file", tlsArgs(f.CertFile, missing, f.CAFile), []string{missing + " (--etcd-key) does not exist"}},
		{"expired cert", tlsArgs(f.ExpiredCertFile, f.ExpiredKeyFile, f.CAFile), []string{f.ExpiredCertFile + " (--etcd-cert) expired at"}},
	} {
		for _, repair := range []bool{false, true} {
			code, _, stderr := w.run(repair, append(tc.args, "--timeout", "3s")...)
			if code != audit.ExitError {
				t.Errorf("%s (repair %v): exit %d, want %d", tc.name, repair, code, audit.ExitError)
			}
			for _, want := range tc.wants {
				if !strings.Contains(stderr, want) {
					t.Errorf("%s (repair %v): stderr %q\ndoes not name %q", tc.name, repair, stderr, want)
				}
			}
		}
	}
}
