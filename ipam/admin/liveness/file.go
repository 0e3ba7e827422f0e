package liveness

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
)

// File is a JSON list of Attachments an operator (or a tool) wrote.
type File struct {
	Path string
	Node string // the node the file describes; "" for every node
}

// Read reads the whole file; an entry without containerID or ifname makes
// it unreadable.
func (f File) Read(context.Context) (*View, error) {
	data, err := bounded.Read(f.Path, bounded.List)
	if err != nil {
		return nil, fmt.Errorf("liveness file %w", err)
	}
	var atts []Running
	if err := json.Unmarshal(data, &atts); err != nil {
		return nil, fmt.Errorf("liveness file %s: %w", f.Path, err)
	}
	for i, a := range atts {
		if a.ContainerID == "" || a.IfName == "" {
			return nil, fmt.Errorf("liveness file %s: entry %d lacks containerID or ifname", f.Path, i)
		}
	}
	return NewView("file "+f.Path, f.Node, atts), nil
}
