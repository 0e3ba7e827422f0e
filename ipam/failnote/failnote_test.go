package failnote

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A note written is read back whole, a cleared one is gone, and a note
// that does not parse is an error, never "nothing failed".
func TestNoteRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	if n, err := Read(dir, "net1"); n != nil || err != nil {
		t.Fatalf("Read of no note = %v, %v; want nil, nil", n, err)
	}
	at := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
	Write(dir, Note{At: at, Verb: "ADD", Network: "net1", Code: 11, Msg: "etcd not reachable"})
	n, err := Read(dir, "net1")
	if err != nil || n == nil || !n.At.Equal(at) || n.Verb != "ADD" || n.Code != 11 {
		t.Fatalf("Read = %+v, %v; want the note written", n, err)
	}
	Clear(dir, "net1")
	if n, err := Read(dir, "net1"); n != nil || err != nil {
		t.Fatalf("Read after Clear = %v, %v; want nil, nil", n, err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileOf("net1")), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir, "net1"); err == nil {
		t.Fatal("a note that does not parse read as none")
	}
	// One note per network: another network's success never hides it.
	Write(dir, Note{At: at, Verb: "ADD", Network: "net2", Msg: "x"})
	Clear(dir, "net3")
	if n, err := Read(dir, "net2"); n == nil || err != nil {
		t.Fatalf("net2's note after net3's success: %v, %v", n, err)
	}
	if FileOf("../../etc/x") == "failing-../../etc/x.json" || FileOf("a/b") != FileOf("a/b") {
		t.Error("FileOf must name a file in the cache dir, the same each time")
	}
}
