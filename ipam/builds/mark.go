package builds

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
)

// Mark is the build mark: it is in every binary that refers to it
// (AdminBinary, through IsSafeIPAM, and EtcdBinary, for releases that
// knew no plugin/safe-ipam-etcd), and tells safe-ipam from Calico's
// binary when both are named calico-ipam, whatever their versions. Test
// doubles carry it too.
const Mark = "safe-ipam:binary-mark:6c1f0a2e-94d3-4b8e-a5f7-0e3d2c9b8a41"

// mainPackages are what Go's build info names as the main package of the
// CNI binary's builds: plugin/safe-ipam and plugin/safe-ipam-etcd, and
// plugin in releases that built both programs from one package (a node
// being upgraded still has that one). The lean build does not refer to
// Mark, so its build info, not Mark, tells it apart.
var mainPackages = []string{"github.com/safe-ipam/safe-ipam/plugin/" + CNIBinary, "github.com/safe-ipam/safe-ipam/plugin/" + EtcdBinary,
	"github.com/safe-ipam/safe-ipam/plugin"}

// IsSafeIPAM says whether the file at path is a safe-ipam binary: by its
// Go build info, or by Mark. A missing file is not, and not an error.
func IsSafeIPAM(path string) (bool, error) {
	f, err := bounded.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %w", err)
	}
	defer f.Close()
	if info, err := buildinfo.Read(f); err == nil && slices.Contains(mainPackages, info.Path) {
		return true, nil
	}
	found, err := containsMark(bufio.NewReaderSize(io.NewSectionReader(f, 0, bounded.Binary), 1<<20))
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	return found, nil
}

// containsMark scans in chunks that overlap by the mark's length, so a
// mark split across two reads is still found.
func containsMark(r io.Reader) (bool, error) {
	mark := []byte(Mark)
	buf := make([]byte, 0, 1<<20+len(mark))
	chunk := make([]byte, 1<<20)
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if bytes.Contains(buf, mark) {
			return true, nil
		}
		if len(buf) > len(mark) {
			buf = append(buf[:0], buf[len(buf)-len(mark):]...)
		}
		if errors.Is(err, io.EOF) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
}
