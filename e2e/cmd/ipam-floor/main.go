// Command ipam-floor is the least an exec-per-call IPAM plugin in front of
// a delegate must do, for make bench to measure: exec the delegate with
// the call's stdin and environment and print its answer, around the two
// durable writes safe-ipam makes per ADD and per DEL, in a file store or
// in etcd. It checks nothing, logs nothing and handles no failure but by
// exiting; it is not a plugin to run, only a floor to measure against.
//
// It is built as safe-ipam's two CNI builds are: with -tags floorfile it
// links no etcd client and keeps records in files only, as the lean CNI
// binary (make bench runs it as ipam-floor); without, it links the client
// and pays its package init on every call, as safe-ipam-etcd (make bench
// runs it as ipam-floor-etcd). Its config is the delegate's, plus "delegate" (the delegate's type) and
// "floor": {"store": "file", "dir": ...} or {"store": "etcd",
// "endpoints": [...], "prefix": ...}; the delegate gets stdin unchanged.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

type config struct {
	Name     string `json:"name"`
	Delegate string `json:"delegate"`
	Floor    struct {
		Store     string   `json:"store"`
		Dir       string   `json:"dir"`
		Endpoints []string `json:"endpoints"`
		Prefix    string   `json:"prefix"`
	} `json:"floor"`
}

// records writes an attachment's record before and after the delegate.
type records interface {
	// before: ADD's pending record, DEL's releasing mark (durable).
	before(verb string) error
	// after: ADD's commit with the result's addresses indexed, DEL's forget.
	after(verb string, result []byte) error
}

// attachment names the call's record, as safe-ipam's store keys do.
type attachment struct{ network, containerID, ifName string }

func main() {
	verb := os.Getenv("CNI_COMMAND")
	if verb == "VERSION" {
		fmt.Print(`{"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}`)
		return
	}
	out, err := run(verb)
	if err != nil {
		fmt.Printf(`{"cniVersion":"1.0.0","code":999,"msg":%q}`, err.Error())
		os.Exit(1)
	}
	os.Stdout.Write(out)
}

func run(verb string) ([]byte, error) {
	stdin, err := readStdin()
	if err != nil {
		return nil, err
	}
	var cfg config
	if err := json.Unmarshal(stdin, &cfg); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	att := attachment{network: cfg.Name, containerID: os.Getenv("CNI_CONTAINERID"), ifName: os.Getenv("CNI_IFNAME")}
	var rec records
	switch cfg.Floor.Store {
	case "file":
		rec = &fileRecords{dir: filepath.Join(cfg.Floor.Dir, att.network), att: att}
	case "etcd":
		if rec, err = openEtcd(cfg.Floor.Endpoints, cfg.Floor.Prefix, att); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("floor.store %q: want file or etcd", cfg.Floor.Store)
	}
	if verb != "ADD" && verb != "DEL" {
		return delegate(cfg.Delegate, stdin)
	}
	if err := rec.before(verb); err != nil {
		return nil, fmt.Errorf("%s before the delegate: %w", verb, err)
	}
	out, err := delegate(cfg.Delegate, stdin)
	if err != nil {
		return nil, err
	}
	if err := rec.after(verb, out); err != nil {
		return nil, fmt.Errorf("%s after the delegate: %w", verb, err)
	}
	return out, nil
}

func readStdin() ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(os.Stdin)
	return b.Bytes(), err
}

// delegate runs typ from CNI_PATH with the call's stdin and environment.
func delegate(typ string, stdin []byte) ([]byte, error) {
	for _, dir := range strings.Split(os.Getenv("CNI_PATH"), ":") {
		path := filepath.Join(dir, typ)
		if _, err := os.Stat(path); err != nil {
			continue
		}
		cmd := exec.Command(path)
		cmd.Stdin, cmd.Stderr = bytes.NewReader(stdin), os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %v: %s", typ, err, out)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s not found in CNI_PATH", typ)
}

// addresses are the result's addresses, which the commit indexes.
func addresses(result []byte) ([]string, error) {
	var r struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(result, &r); err != nil {
		return nil, fmt.Errorf("delegate's result: %w", err)
	}
	out := make([]string, len(r.IPs))
	for i, ip := range r.IPs {
		out[i], _, _ = strings.Cut(ip.Address, "/")
	}
	return out, nil
}

// record is what is written: about the size of safe-ipam's records.
func record(att attachment, state string, ips []string, result []byte) []byte {
	data, _ := json.Marshal(map[string]any{"network": att.network, "containerID": att.containerID, "ifName": att.ifName,
		"state": state, "ips": ips, "result": json.RawMessage(orNull(result)), "netns": os.Getenv("CNI_NETNS"), "args": os.Getenv("CNI_ARGS")})
	return data
}

func orNull(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}
