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
	if n, err := Read(dir); n != nil || err != nil {
		t.Fatalf("Read of no note = %v, %v; want nil, nil", n, err)
	}
	at := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
	Write(dir, Note{At: at, Verb: "ADD", Network: "net1", Code: 11, Msg: "etcd not reachable"})
	n, err := Read(dir)
	if err != nil || n == nil || !n.At.Equal(at) || n.Verb != "ADD" || n.Code != 11 {
		t.Fatalf("Read = %+v, %v; want the note written", n, err)
	}
	Clear(dir)
	if n, err := Read(dir); n != nil || err != nil {
		t.Fatalf("Read after Clear = %v, %v; want nil, nil", n, err)
	}
	if err := os.WriteFile(filepath.Join(dir, File), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(dir); err == nil {
		t.Fatal("a note that does not parse read as none")
	}
}
