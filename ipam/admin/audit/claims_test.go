package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/e2e/harness/calicodata"
	"github.com/safe-ipam/safe-ipam/e2e/harness/kubetest"
	"github.com/safe-ipam/safe-ipam/ipam/admin/audit"
	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/admin/repair"
	"github.com/safe-ipam/safe-ipam/ipam/cni/invocation"
	"github.com/safe-ipam/safe-ipam/ipam/kubeapi"
	"github.com/safe-ipam/safe-ipam/ipam/store/claims"
	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Issue 45: on Calico's Kubernetes datastore the audit compares this
// machine's records with the cluster-wide claims, from a table.
func TestJudgeClaims(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	old := now.Add(-time.Hour)
	rec := func(cid, ip string, state record.State, created time.Time) *record.Record {
		return &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: cid, IfName: "eth0"}, Node: "node1", Host: "me",
			Handle: "net1." + cid, State: state, IPs: []string{ip + "/26"}, Created: created}
	}
	claimOf := func(r *record.Record, created time.Time) *claims.Claim {
		cl := claims.Of(r, netip.MustParsePrefix(r.IPs[0]).Addr())
		cl.Created = created
		return cl
	}
	hostless := func(r *record.Record) *record.Record {
		r.Host = ""
		return r
	}
	other := rec("theirs", "10.0.0.3", record.Committed, old)
	other.Node, other.Host = "node2", "them"
	tests := []struct {
		name string
		recs []*record.Record
		seen func(recs []*record.Record) audit.ClaimsSeen
		want []string
	}{
		{"every record claimed", []*record.Record{rec("a", "10.0.0.1", record.Committed, old)},
			func(r []*record.Record) audit.ClaimsSeen {
				return audit.ClaimsSeen{Own: []*claims.Claim{claimOf(r[0], old)}}
			}, nil},
		{"an older safe-ipam's record, without a host, claimed as this machine's", []*record.Record{hostless(rec("a", "10.0.0.1", record.Committed, old))},
			func(r []*record.Record) audit.ClaimsSeen {
				return audit.ClaimsSeen{Own: []*claims.Claim{claimOf(rec("a", "10.0.0.1", record.Committed, old), old)}}
			}, nil},
		{"a record without a claim", []*record.Record{rec("a", "10.0.0.1", record.Committed, old)},
			func([]*record.Record) audit.ClaimsSeen {
				return audit.ClaimsSeen{OnAddr: map[netip.Addr]*claims.Claim{netip.MustParseAddr("10.0.0.1"): nil}}
			}, []string{"unclaimed 10.0.0.1"}},
		{"a young record: an ADD at work", []*record.Record{rec("a", "10.0.0.1", record.Committed, now.Add(-time.Second))},
			func([]*record.Record) audit.ClaimsSeen { return audit.ClaimsSeen{} }, nil},
		{"a pending record is not judged", []*record.Record{rec("a", "10.0.0.1", record.Pending, old)},
			func([]*record.Record) audit.ClaimsSeen { return audit.ClaimsSeen{} }, nil},
		{"another node's claim on a record's address", []*record.Record{rec("a", "10.0.0.3", record.Committed, old)},
			func([]*record.Record) audit.ClaimsSeen {
				return audit.ClaimsSeen{OnAddr: map[netip.Addr]*claims.Claim{netip.MustParseAddr("10.0.0.3"): claimOf(other, old)}}
			}, []string{"duplicate 10.0.0.3"}},
		{"a claim no record holds", nil,
			func([]*record.Record) audit.ClaimsSeen {
				return audit.ClaimsSeen{Own: []*claims.Claim{claimOf(rec("gone", "10.0.0.4", record.Committed, old), old)}}
			}, []string{"orphan-claim 10.0.0.4"}},
		{"a young claim no record holds yet", nil,
			func([]*record.Record) audit.ClaimsSeen {
				return audit.ClaimsSeen{Own: []*claims.Claim{claimOf(rec("new", "10.0.0.4", record.Committed, old), now.Add(-time.Second))}}
			}, nil},
		{"a claim whose record is releasing", []*record.Record{rec("a", "10.0.0.1", record.Releasing, old)},
			func(r []*record.Record) audit.ClaimsSeen {
				return audit.ClaimsSeen{Own: []*claims.Claim{claimOf(r[0], old)}}
			},
			[]string{"orphan-claim 10.0.0.1"}},
		{"a damaged claim", nil,
			func([]*record.Record) audit.ClaimsSeen { return audit.ClaimsSeen{Damaged: []string{"net1.10-0-0-9"}} },
			[]string{"inconsistent "}},
	}
	for _, tt := range tests {
		var got []string
		for _, f := range audit.JudgeClaims(tt.recs, tt.seen(tt.recs), "me", time.Minute, now) {
			got = append(got, string(f.Kind)+" "+f.Address)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// Against a real kube-apiserver, through --conf: a record of this node
// that no claim names is unclaimed, a claim of this machine's that no
// record holds is an orphan, and a claimed record is neither; repair
// leaves both to gc. Without the claims served, a warning says the
// comparison was not made.
func TestKubeAuditComparesTheClaims(t *testing.T) {
	srv := kubetest.Start(t)
	if err := srv.Apply(calicodata.Require(t, calicodata.CRDs)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	netconf := fmt.Sprintf(`{"name":"net1","cniVersion":"1.0.0","plugins":[{"type":"calico","datastore_type":"kubernetes","kubernetes":{"kubeconfig":%q},"nodename":"node1",
		"ipam":{"type":"safe-ipam","delegate":{"type":"calico-ipam"},"store":{"type":"file","dir":%q},"cacheDir":%q}}]}`,
		srv.Kubeconfig, filepath.Join(dir, "records"), filepath.Join(dir, "cache"))
	conf := filepath.Join(dir, "10-calico.conflist")
	if err := os.WriteFile(conf, []byte(netconf), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "records"), 0o700); err != nil {
		t.Fatal(err)
	}
	args := []string{"--conf", conf, "--json", "--cni-cache=", "--min-age=0"}
	var stdout, stderr bytes.Buffer
	audit.Run(args, &stdout, &stderr)
	if !strings.Contains(stdout.String(), "AddressClaims are not served") {
		t.Fatalf("audit without the claims served says nothing of them:\n%s\n%s", stdout.String(), stderr.String())
	}
	if err := srv.Apply("../../../deploy/safe-ipam-claims.yaml"); err != nil {
		t.Fatal(err)
	}
	file, err := cninode.ReadFile(conf, dir)
	if err != nil {
		t.Fatal(err)
	}
	cfg := file.SafeIPAM
	fs, err := filestore.Open(cfg.Store.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	claimed := invocation.Claimed(cfg, fs, "node1", slog.New(slog.DiscardHandler), false)
	rec := func(cid, ip string) *record.Record {
		return &record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: cid, IfName: "eth0"}, Node: "node1", Host: record.ThisHost(),
			Handle: "net1." + cid, State: record.Committed, IPs: []string{ip + "/26"}, Created: time.Now().UTC()}
	}
	if _, err := claimed.Commit(ctx, nil, rec("claimed", "10.244.0.1")); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Commit(ctx, nil, rec("unclaimed", "10.244.0.2")); err != nil {
		t.Fatal(err)
	}
	api, err := kubeapi.New(srv.Kubeconfig, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := claims.NewClient(api).Claim(ctx, rec("gone", "10.244.0.3"), netip.MustParseAddr("10.244.0.3")); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	audit.Run(append(slices.Clone(args), "--store-dir", dir), &stdout, &stderr)
	if !strings.Contains(stdout.String(), "were not compared with the cluster-wide claims") {
		t.Errorf("audit of another --store-dir than --conf's says nothing of the claims it did not compare:\n%s", stdout.String())
	}
	for _, fix := range []bool{false, true} {
		stdout.Reset()
		stderr.Reset()
		runCmd(args, &stdout, &stderr, fix)
		var rep repair.Report
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("report: %v\n%s\n%s", err, stdout.String(), stderr.String())
		}
		var got []string
		for _, f := range rep.Findings {
			if f.Kind == audit.Unclaimed || f.Kind == audit.OrphanClaim {
				got = append(got, string(f.Kind)+" "+f.Address)
			}
		}
		slices.Sort(got)
		if want := []string{"orphan-claim 10.244.0.3", "unclaimed 10.244.0.2"}; !slices.Equal(got, want) {
			t.Errorf("fix %v: claim findings %v, want %v\n%s", fix, got, want, stdout.String())
		}
		left := 0
		for _, r := range rep.Refused {
			if strings.Contains(r.Why, "gc --apply settles the claims") {
				left++
			}
		}
		if fix && left != 2 {
			t.Errorf("repair left %d claim findings to gc, want 2: %+v", left, rep.Refused)
		}
	}
}
