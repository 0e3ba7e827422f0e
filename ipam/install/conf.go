package install

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Conf is one network config file of the conf dir.
type Conf struct {
	Path       string
	Network    string
	CNIVersion string
	Plugins    []Plugin
	// Err says why the file does not parse; nothing else is set then.
	Err error

	raw  []byte
	perm os.FileMode
}

// Plugin is what install and doctor read of one plugin of a conflist.
type Plugin struct {
	Type     string
	IPAMType string
	// Delegate is the delegate the ipam section names, "" when none.
	Delegate string
	// Raw is the plugin's config, as libcni hands it to the plugin once
	// name and cniVersion are added (see Conf.PluginConfig).
	Raw json.RawMessage
}

// UsesCalicoIPAM says whether calico-ipam is this plugin's IPAM.
func (p Plugin) UsesCalicoIPAM() bool { return p.IPAMType == CalicoIPAM || p.Type == CalicoIPAM }

// RoutedThroughSafeIPAM says whether conflist mode's rewrite is in place:
// the IPAM is safe-ipam, and its delegate calico-ipam.
func (p Plugin) RoutedThroughSafeIPAM() bool {
	return p.IPAMType == SafeIPAM && (p.Delegate == CalicoIPAM || p.Delegate == "")
}

// IsCalico says whether the file configures calico-ipam, directly or
// behind safe-ipam.
func (c *Conf) IsCalico() bool {
	for _, p := range c.Plugins {
		if p.UsesCalicoIPAM() || p.RoutedThroughSafeIPAM() {
			return true
		}
	}
	return false
}

// ReadConfs reads every network config file of dir.
func ReadConfs(dir string) ([]*Conf, error) {
	files, err := ConfFiles(dir)
	if err != nil {
		return nil, err
	}
	confs := make([]*Conf, 0, len(files))
	for _, f := range files {
		confs = append(confs, ReadConf(f))
	}
	return confs, nil
}

// ReadConf reads one network config file; a file that does not parse
// comes back with Err set.
func ReadConf(path string) *Conf {
	c := &Conf{Path: path}
	st, err := os.Stat(path)
	if err != nil {
		c.Err = err
		return c
	}
	c.perm = st.Mode().Perm()
	if c.raw, err = os.ReadFile(path); err != nil {
		c.Err = err
		return c
	}
	if err := c.parse(); err != nil {
		c.Err = fmt.Errorf("%s does not parse: %w", path, err)
	}
	return c
}

type rawPlugin struct {
	Type string `json:"type"`
	IPAM *struct {
		Type     string          `json:"type"`
		Delegate json.RawMessage `json:"delegate"`
	} `json:"ipam"`
}

func (c *Conf) parse() error {
	var top struct {
		Name       string            `json:"name"`
		CNIVersion string            `json:"cniVersion"`
		Plugins    []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(c.raw, &top); err != nil {
		return err
	}
	c.Network, c.CNIVersion = top.Name, top.CNIVersion
	raws := top.Plugins
	if !c.isList() {
		raws = []json.RawMessage{c.raw}
	}
	for i, raw := range raws {
		p, err := readPlugin(raw)
		if err != nil {
			return fmt.Errorf("plugin %d: %w", i, err)
		}
		c.Plugins = append(c.Plugins, p)
	}
	return nil
}

func (c *Conf) isList() bool {
	var probe map[string]json.RawMessage
	_ = json.Unmarshal(c.raw, &probe)
	_, ok := probe["plugins"]
	return ok
}

func readPlugin(raw json.RawMessage) (Plugin, error) {
	var rp rawPlugin
	if err := json.Unmarshal(raw, &rp); err != nil {
		return Plugin{}, err
	}
	p := Plugin{Type: rp.Type, Raw: raw}
	if rp.IPAM == nil {
		return p, nil
	}
	p.IPAMType = rp.IPAM.Type
	if len(rp.IPAM.Delegate) > 0 {
		var d struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(rp.IPAM.Delegate, &d); err != nil {
			return Plugin{}, fmt.Errorf("ipam.delegate: %w", err)
		}
		p.Delegate = d.Type
		if p.Delegate == "" {
			p.Delegate = CalicoIPAM
		}
	}
	return p, nil
}

// PluginConfig is plugin i's config as the runtime passes it: the
// plugin's keys plus the list's name and cniVersion.
func (c *Conf) PluginConfig(i int) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(c.Plugins[i].Raw, &obj); err != nil {
		return nil, err
	}
	if c.isList() {
		obj["name"], _ = json.Marshal(c.Network)
		obj["cniVersion"], _ = json.Marshal(c.CNIVersion)
	}
	return json.Marshal(obj)
}

// routeThroughSafeIPAM is conflist mode's rewrite: each calico-ipam IPAM
// becomes safe-ipam with calico-ipam as its delegate, and a plugin that is
// calico-ipam itself becomes safe-ipam. Only those values change; every
// other byte of the file stays.
func (c *Conf) routeThroughSafeIPAM() ([]byte, error) {
	prefix := []string{}
	if c.isList() {
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
	spans, err := stringValues(c.raw, CalicoIPAM, ipamType, pluginType)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Path, err)
	}
	var out bytes.Buffer
	last := 0
	for _, s := range spans {
		out.Write(c.raw[last:s.start])
		out.WriteString(strconv.Quote(SafeIPAM))
		if s.path == ipamType {
			out.WriteString(`, "delegate": {"type": "` + CalicoIPAM + `"}`)
		}
		last = s.end
	}
	out.Write(c.raw[last:])
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
