package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/store/filestore"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
)

// Issue 20, finding 5: names from outside (here a file name in the conf
// dir; records, Calico's data and the runtime go the same way) never put
// a control character on the operator's terminal, and --json still
// decodes to the name as it is.
func TestAdminOutputEscapesControlCharacters(t *testing.T) {
	bin, conf := t.TempDir(), t.TempDir()
	name := "05-\x1b[2J\x1b[31mred.conflist"
	if err := os.WriteFile(filepath.Join(conf, name), []byte(`{"plugins": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []byte {
		cmd := exec.Command(filepath.Join(binDir, "safe-ipam-admin"), append([]string{"doctor", "--cni-bin-dir", bin, "--cni-conf-dir", conf}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		_ = cmd.Run() // not protected: exit 1
		return out.Bytes()
	}
	table := run()
	if bytes.ContainsRune(table, 0x1b) || !strings.Contains(string(table), `05-\u001b[2J\u001b[31mred.conflist`) {
		t.Fatalf("doctor printed:\n%q\nwant the file name with its ESC escaped", table)
	}
	var report struct {
		Problems []string `json:"problems"`
	}
	js := run("--json")
	if err := json.Unmarshal(js, &report); err != nil || len(report.Problems) == 0 || !strings.Contains(report.Problems[0], name) {
		t.Fatalf("doctor --json = %q (%v); want problems naming %q", js, err, name)
	}
}

// Issue 42, item 7: what reaches stderr from elsewhere than a command's
// own writer, here the delegate's log lines that gc relays as libcni
// does, goes through the same filter: ESC never reaches the terminal.
func TestRelayedDelegateOutputIsEscaped(t *testing.T) {
	cmd := gcOfAGoneRecord(t, `printf 'calico-ipam: \033[2J\033[31mreleased\n' >&2`)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("gc: %v\n%s", err, out.String())
	}
	if bytes.ContainsRune(out.Bytes(), 0x1b) || !strings.Contains(out.String(), `calico-ipam: \u001b[2J\u001b[31mreleased`) {
		t.Fatalf("gc printed:\n%q\nwant the delegate's line with its ESC escaped", out.String())
	}
}

// A stderr that cannot be written (a full disk, a closed terminal) does
// not block the command once the filter's pipe fills (review of issue
// 42): the filter drains what it can no longer write.
func TestAnUnwritableStderrBlocksNothing(t *testing.T) {
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer full.Close()
	cmd := gcOfAGoneRecord(t, `head -c 200000 /dev/zero | tr '\0' x >&2`)
	cmd.Stderr = full
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("gc with an unwritable stderr still runs after 20s")
	}
}

// gcOfAGoneRecord is `safe-ipam-admin gc --apply` over a file store
// holding one record whose sandbox is gone, with a delegate that runs
// relay (a shell line) on DEL.
func gcOfAGoneRecord(t *testing.T, relay string) *exec.Cmd {
	t.Helper()
	dir := t.TempDir()
	bin, records := filepath.Join(dir, "bin"), filepath.Join(dir, "records")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	delegate := "#!/bin/sh\nif [ \"$CNI_COMMAND\" = VERSION ]; then echo '{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"1.0.0\"]}'; exit 0; fi\n" + relay + "\n"
	if err := os.WriteFile(filepath.Join(bin, "calico-ipam"), []byte(delegate), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "10-calico.conflist")
	if err := os.WriteFile(conf, []byte(`{"name":"k8s-pod-network","cniVersion":"1.0.0","plugins":[{"type":"calico","nodename":"node1",
		"ipam":{"type":"safe-ipam","delegate":{"type":"calico-ipam"},"logFile":"","cacheDir":"","store":{"type":"file","dir":"`+records+`"}}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := filestore.Open(records)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-time.Hour)
	att := record.Attachment{Network: "k8s-pod-network", ContainerID: "gone", IfName: "eth0"}
	if _, err := st.Swap(context.Background(), att, nil, &record.Record{Attachment: att, Node: "node1", Handle: "k8s-pod-network.gone",
		State: record.Committed, IPs: []string{"10.244.0.7/26"}, Created: at, Updated: at}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	live := filepath.Join(dir, "live.json")
	if err := os.WriteFile(live, []byte(`[{"containerID":"other","ifname":"eth0"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	return exec.Command(filepath.Join(binDir, "safe-ipam-admin"), "gc", "--conf", conf, "--cni-bin-dir", bin, "--live", live, "--apply")
}
