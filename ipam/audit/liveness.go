package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// LiveAttachment is an attachment known to be running.
type LiveAttachment struct {
	Network      string   `json:"network,omitempty"`
	ContainerID  string   `json:"containerID"`
	IfName       string   `json:"ifname"`
	PodNamespace string   `json:"podNamespace,omitempty"`
	PodName      string   `json:"podName,omitempty"`
	IPs          []string `json:"ips,omitempty"`
}

// Liveness is what a liveness source says runs on one node ("" for every
// node). A nil *Liveness means no source was given: nothing may be judged
// dead.
type Liveness struct {
	Source      string
	Node        string
	Attachments []LiveAttachment

	containers map[string]bool
	pods       map[string]bool
	addrs      map[netip.Addr]bool
	attach     map[[2]string]bool
	// podBlind counts entries that name neither their pod nor an address:
	// a running container of any pod could hide behind each of them.
	podBlind int
}

// Covers says whether the source speaks for node.
func (l *Liveness) Covers(node string) bool {
	return l != nil && (l.Node == "" || l.Node == node)
}

func (l *Liveness) index() {
	l.containers, l.pods, l.addrs, l.attach = map[string]bool{}, map[string]bool{}, map[netip.Addr]bool{}, map[[2]string]bool{}
	for _, a := range l.Attachments {
		l.containers[a.ContainerID] = true
		l.attach[[2]string{a.ContainerID, a.IfName}] = true
		named := a.PodNamespace != "" && a.PodName != ""
		if named {
			l.pods[a.PodNamespace+"."+a.PodName] = true
		}
		for _, ip := range a.IPs {
			if p, err := netip.ParsePrefix(ip); err == nil {
				l.addrs[p.Addr()], named = true, true
			} else if addr, err := netip.ParseAddr(ip); err == nil {
				l.addrs[addr], named = true, true
			}
		}
		if !named {
			l.podBlind++
		}
	}
}

// podNamesGap says why the source cannot speak for pod names, or "". A
// pod-name handle's pod is gone only if no running container belongs to
// it; an entry that names neither its pod nor its addresses could be that
// container, so its absence from the source proves nothing (incident 003:
// no evidence is not evidence of absence). The CNI cache names both.
func (l *Liveness) podNamesGap() string {
	if l.podBlind == 0 {
		return ""
	}
	return fmt.Sprintf("%s cannot speak for pod names: %d of its %d entries carry neither podNamespace and podName nor ips",
		l.Source, l.podBlind, len(l.Attachments))
}

// ReadLiveFile reads a JSON list of live attachments.
func ReadLiveFile(path, node string) (*Liveness, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("liveness file: %w", err)
	}
	l := &Liveness{Source: "file " + path, Node: node}
	if err := json.Unmarshal(data, &l.Attachments); err != nil {
		return nil, fmt.Errorf("liveness file %s: %w", path, err)
	}
	for i, a := range l.Attachments {
		if a.ContainerID == "" || a.IfName == "" {
			return nil, fmt.Errorf("liveness file %s: entry %d lacks containerID or ifname", path, i)
		}
	}
	l.index()
	return l, nil
}

// cacheEntry is the part of libcni's result cache file that names the
// attachment and its pod.
type cacheEntry struct {
	Kind        string      `json:"kind"`
	ContainerID string      `json:"containerId"`
	IfName      string      `json:"ifName"`
	NetworkName string      `json:"networkName"`
	CNIArgs     [][2]string `json:"cniArgs"`
	Result      struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	} `json:"result"`
}

// ReadCNICache reads libcni's result cache, which the container runtime
// keeps per attachment it set up on this node. Any file it cannot read
// makes the whole source unreadable: a partial view must not pass as the
// truth.
func ReadCNICache(dir, node string) (*Liveness, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("CNI result cache: %w", err)
	}
	l := &Liveness{Source: "cni-cache " + dir, Node: node}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		a, err := readCacheEntry(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		l.Attachments = append(l.Attachments, a)
	}
	l.index()
	return l, nil
}

func readCacheEntry(path string) (LiveAttachment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return LiveAttachment{}, fmt.Errorf("CNI result cache: %w", err)
	}
	var c cacheEntry
	if err := json.Unmarshal(data, &c); err != nil {
		return LiveAttachment{}, fmt.Errorf("CNI result cache %s: %w", path, err)
	}
	if c.ContainerID == "" || c.IfName == "" {
		return LiveAttachment{}, errors.New("CNI result cache " + path + ": no containerId or ifName")
	}
	a := LiveAttachment{Network: c.NetworkName, ContainerID: c.ContainerID, IfName: c.IfName}
	for _, kv := range c.CNIArgs {
		switch strings.ToUpper(kv[0]) {
		case "K8S_POD_NAMESPACE":
			a.PodNamespace = kv[1]
		case "K8S_POD_NAME":
			a.PodName = kv[1]
		}
	}
	for _, ip := range c.Result.IPs {
		a.IPs = append(a.IPs, ip.Address)
	}
	return a, nil
}
