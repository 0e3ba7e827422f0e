package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/safe-ipam/safe-ipam/ipam/store"
	"github.com/safe-ipam/safe-ipam/ipam/store/record"
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

// A command that only reads (audit, doctor) opens the store read-only: it
// lists what the plugin wrote, creates nothing (no directory, no lock
// file) and cannot write.
func TestReadOnlyReadsAndNeverWrites(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	if _, err := OpenReadOnly(dir); err == nil {
		t.Fatal("OpenReadOnly of a missing store succeeded")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("OpenReadOnly created %s: %v", dir, err)
	}
	rw, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	att := record.Attachment{Network: "net1", ContainerID: "c1", IfName: "eth0"}
	rec := &record.Record{Attachment: att, State: record.Committed, IPs: []string{"10.0.0.1/32"}}
	if _, err := rw.Swap(context.Background(), att, nil, rec); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "net1", lockName)); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ro.List(context.Background(), "net1")
	if err != nil || len(recs) != 1 || recs[0].ContainerID != "c1" {
		t.Fatalf("List through the read-only store: %v, %v", recs, err)
	}
	if err := ro.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
	if _, err := ro.Swap(context.Background(), att, recs[0], nil); err == nil {
		t.Error("Swap through the read-only store succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "net1", lockName)); !os.IsNotExist(err) {
		t.Errorf("the read-only store took a lock: %v", err)
	}
	if got, _ := rw.Get(context.Background(), att); got == nil {
		t.Error("the record is gone")
	}
}

// A record's file is "<containerID>:<ifname>", and a quarantine mark is
// "q:<containerID>:<ifname>": the record of a container named "q" is a
// record, and List must not take it for a mark.
func TestListKeepsContainerNamedLikeAMark(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "records"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cid := range []string{"q", "qq", "abc"} {
		att := record.Attachment{Network: "net1", ContainerID: cid, IfName: "eth0"}
		if _, err := s.Swap(context.Background(), att, nil, &record.Record{Attachment: att, State: record.Committed}); err != nil {
			t.Fatal(err)
		}
	}
	// A quarantine mark beside them, as fencing writes it.
	if err := os.Symlink("abc:eth0", filepath.Join(s.networkDir("net1"), "q:zzz:eth0")); err != nil {
		t.Fatal(err)
	}
	recs, err := s.List(context.Background(), "net1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.ContainerID)
	}
	if strings.Join(got, ",") != "abc,q,qq" {
		t.Errorf("List gives %v, want abc, q and qq", got)
	}
}

// Issue 20, finding 2: a lock held by a process that hangs (stopped with
// it held) makes a write wait only until its context ends, and the wait
// is an ErrUnavailable, which a CNI call answers with code 11. Once the
// holder lets go, writes go on.
func TestLockWaitEndsWithTheContext(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	att := record.Attachment{Network: "net1", ContainerID: "c1", IfName: "eth0"}
	if _, err := s.Swap(context.Background(), att, nil, &record.Record{Attachment: att, State: record.Pending}); err != nil {
		t.Fatal(err)
	}
	// Another open file description: flock excludes it as it would another process.
	held, err := os.OpenFile(filepath.Join(dir, "net1", lockName), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := s.Swap(ctx, att, nil, &record.Record{Attachment: att, State: record.Pending})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "lock") {
			t.Fatalf("Swap behind a held lock = %v; want ErrUnavailable naming the lock", err)
		}
	case <-time.After(10 * time.Second):
		held.Close()
		t.Fatal("Swap behind a held lock still waits after 10s with a 200ms deadline")
	}
	held.Close()
	if _, err := s.Swap(context.Background(), att, nil, nil); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("Swap after the lock was let go = %v; want the usual conflict", err)
	}
}

// Issue 20, finding 1: an address index link is input. One whose target
// is not a record's name in the network's directory is never read as the
// holder (here it points outside, at a committed record), and is taken
// over.
func TestIndexLinkOutsideTheNetworkIsNoHolder(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	outside := filepath.Join(dir, "c9:eth0") // beside the network's directory
	decoy := fileRecord{Revision: 1, Record: record.Record{Attachment: record.Attachment{Network: "net1", ContainerID: "c9", IfName: "eth0"},
		State: record.Committed, IPs: []string{"10.0.0.1/26"}}}
	data, _ := json.Marshal(decoy)
	if err := os.WriteFile(outside, data, 0o600); err != nil {
		t.Fatal(err)
	}
	att := record.Attachment{Network: "net1", ContainerID: "c1", IfName: "eth0"}
	p, err := s.Swap(ctx, att, nil, &record.Record{Attachment: att, State: record.Pending})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../c9:eth0", s.addressLink("net1", "10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	c := *p
	c.State, c.IPs = record.Committed, []string{"10.0.0.1/26"}
	if _, err := s.Commit(ctx, p, &c); err != nil {
		t.Fatalf("commit over a link that names no record of the network: %v", err)
	}
}
