package liveness

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
	"github.com/safe-ipam/safe-ipam/ipam/bounded/boundedtest"
)

// Issue 42, item 2: a FIFO under --cni-cache (as an entry, or as the
// cache directory itself) makes the source unreadable at once: gc, audit
// and adopt neither wait on it nor read it as "nothing runs".
func TestAFIFOInTheCNICacheIsAnUnreadableSource(t *testing.T) {
	entry := `{"kind":"cniCacheV1","containerId":"c1","ifName":"eth0","networkName":"k8s-pod-network","result":{"ips":[{"address":"10.0.0.1/32"}]}}`
	for _, at := range []string{"an entry", "the directory"} {
		t.Run(at, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "results")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "k8s-pod-network-c1-eth0"), []byte(entry), 0o600); err != nil {
				t.Fatal(err)
			}
			fifo := filepath.Join(dir, "k8s-pod-network-c2-eth0")
			if at == "the directory" {
				fifo = dir
			}
			boundedtest.FIFO(t, fifo)
			c := CNICache{Dir: dir, Node: "node1"}
			reads := map[string]func() error{
				"Read":        func() error { _, err := c.Read(context.Background()); return err },
				"ReadLenient": func() error { _, _, err := c.ReadLenient(context.Background()); return err },
			}
			for name, read := range reads {
				err := boundedtest.Returns(t, name, read)
				if !errors.Is(err, bounded.ErrNotRegular) && !errors.Is(err, bounded.ErrNotDirectory) {
					t.Fatalf("%s = %v; want the source unreadable", name, err)
				}
			}
		})
	}
}
