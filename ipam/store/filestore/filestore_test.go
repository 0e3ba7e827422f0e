package filestore

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/record"
	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/storetest"
)

func TestContract(t *testing.T) {
	var dirs []string
	open := func(t *testing.T) store.Store {
		dir := filepath.Join(t.TempDir(), "records")
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { checkTree(t, dir) })
		dirs = append(dirs, dir)
		return s
	}
	storetest.Run(t, open)
	storetest.RunFencing(t, open)
	if len(dirs) == 0 {
		t.Fatal("contract opened no store")
	}
}

// checkTree fails on loose permissions and on temp files left behind.
func checkTree(t *testing.T, dir string) {
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		want := os.FileMode(0o600)
		if info.IsDir() {
			want = 0o700
		}
		// A symlink's own mode means nothing; its 0700 directory guards it.
		if info.Mode()&os.ModeSymlink == 0 && info.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", path, info.Mode().Perm(), want)
		}
		if info.Name()[0] == '.' && info.Name() != lockName {
			t.Errorf("temp file left: %s", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestUnwritableDirIsUnavailable(t *testing.T) {
	if _, err := Open("/proc/safe-ipam-test"); err == nil {
		t.Fatal("opening a store under /proc succeeded")
	}
}

// A file that does not decode stands in as an ownerless pending record.
func TestDamagedRecord(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	att := record.Attachment{Network: "n", ContainerID: "c", IfName: "eth0"}
	if err := os.MkdirAll(filepath.Join(dir, "n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "n", "c:eth0"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List(context.Background(), "n")
	if err != nil || len(recs) != 1 || recs[0].Attachment != att || recs[0].State != record.Pending {
		t.Fatalf("list = %+v, %v", recs, err)
	}
	if _, err := s.Swap(context.Background(), att, recs[0], nil); err != nil {
		t.Fatalf("replacing the damaged record: %v", err)
	}
}
