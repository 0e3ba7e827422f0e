package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/admin/cninode"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// routeThroughSafeIPAM is conflist mode's rewrite: each calico-ipam IPAM
// becomes safe-ipam with calico-ipam as its delegate, and a plugin that is
// calico-ipam itself becomes safe-ipam. Only those values change; every
// other byte of the file stays.
func routeThroughSafeIPAM(c *cninode.Conf) ([]byte, error) {
	return route(c, `{"type": "`+CalicoIPAM+`"}`)
}

// routeWhileLeavingTakeover is routeThroughSafeIPAM with Calico's
// multi-call binary as the delegate's file, run as calico-ipam, as
// takeover's safe-ipam runs it: the config reaches Calico through
// safe-ipam whether <bin>/calico-ipam is still safe-ipam or Calico's
// again. A switch from takeover writes it until calico-ipam is back.
func routeWhileLeavingTakeover(c *cninode.Conf) ([]byte, error) {
	return route(c, `{"type": "`+CalicoIPAM+`", "binary": "`+CalicoBinary+`"}`)
}

func route(c *cninode.Conf, delegate string) ([]byte, error) {
	prefix := []string{}
	if c.IsList() {
		prefix = []string{"plugins", "*"}
	}
	ipamType := strings.Join(append(append([]string{}, prefix...), "ipam", "type"), "/")
	pluginType := strings.Join(append(append([]string{}, prefix...), "type"), "/")
	for i, p := range c.Plugins {
		if p.Type == CalicoIPAM && p.IPAMType != CalicoIPAM {
			return nil, fmt.Errorf("%s: plugin %d is calico-ipam but its ipam.type is %q, not calico-ipam", c.Path, i, p.IPAMType)
		}
		if p.IPAMType == CalicoIPAM && p.Delegate != "" {
			return nil, fmt.Errorf("%s: plugin %d already has an ipam.delegate", c.Path, i)
		}
	}
	spans, err := stringValues(c.Raw, CalicoIPAM, ipamType, pluginType)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Path, err)
	}
	var out bytes.Buffer
	last := 0
	for _, s := range spans {
		out.Write(c.Raw[last:s.start])
		out.WriteString(strconv.Quote(builds.CNIBinary))
		if s.path == ipamType {
			out.WriteString(`, "delegate": ` + delegate)
		}
		last = s.end
	}
	out.Write(c.Raw[last:])
	return out.Bytes(), nil
}

// span is where a string value sits in a document.
type span struct {
	start, end int
	path       string
}

// stringValues finds each string value equal to want at one of paths
// ("/"-joined keys, "*" for any array index), with its byte offsets.
func stringValues(doc []byte, want string, paths ...string) ([]span, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	w := walker{doc: doc, want: want, paths: paths}
	for {
		before := dec.InputOffset()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return w.found, nil
		}
		if err != nil {
			return nil, err
		}
		w.step(tok, int(before), int(dec.InputOffset()))
	}
}

// walker follows a json.Decoder's tokens and keeps the path to each value.
type walker struct {
	doc   []byte
	want  string
	paths []string
	stack []frame
	found []span
}

type frame struct {
	object    bool
	key       string
	expectKey bool
}

func (w *walker) step(tok json.Token, before, after int) {
	if n := len(w.stack); n > 0 && w.stack[n-1].object && w.stack[n-1].expectKey {
		if key, ok := tok.(string); ok {
			w.stack[n-1].key, w.stack[n-1].expectKey = key, false
			return
		}
	}
	switch tok {
	case json.Delim('{'):
		w.stack = append(w.stack, frame{object: true, expectKey: true})
		return
	case json.Delim('['):
		w.stack = append(w.stack, frame{})
		return
	case json.Delim('}'), json.Delim(']'):
		w.stack = w.stack[:len(w.stack)-1]
	default:
		if s, ok := tok.(string); ok && s == w.want {
			w.match(before, after)
		}
	}
	if n := len(w.stack); n > 0 && w.stack[n-1].object {
		w.stack[n-1].expectKey = true
	}
}

func (w *walker) match(before, after int) {
	path := w.path()
	for _, p := range w.paths {
		if p != path {
			continue
		}
		// Only whitespace, ':' and ',' lie between the previous token and
		// this string's opening quote.
		start := before + bytes.IndexByte(w.doc[before:after], '"')
		w.found = append(w.found, span{start: start, end: after, path: p})
	}
}

func (w *walker) path() string {
	parts := make([]string, 0, len(w.stack))
	for _, f := range w.stack {
		if f.object {
			parts = append(parts, f.key)
		} else {
			parts = append(parts, "*")
		}
	}
	return strings.Join(parts, "/")
}
