package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
