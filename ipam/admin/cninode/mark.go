package cninode

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
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// IsSafeIPAM says whether the file at path is a safe-ipam binary: by its
// Go build info, or by builds.Mark. A missing file is not, and not an error.
func IsSafeIPAM(path string) (bool, error) {
	f, err := bounded.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading %w", err)
	}
	defer f.Close()
	if info, err := buildinfo.Read(f); err == nil && slices.Contains(builds.MainPackages, info.Path) {
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
	mark := []byte(builds.Mark)
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
