package guard_test

// The in-test delegate: the test binary copied into a temp CNI_PATH under
// a delegate's name runs as a small IPAM plugin with calico-ipam's handle
// rules, logging every call so tests can see exactly what it was given.

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/safe-ipam/safe-ipam/ipam/cni/cniargs"
)

// Environment of the fake delegate.
const (
	fakeDirEnv      = "FAKE_IPAM_DIR"      // state and call log
	fakeVersionsEnv = "FAKE_IPAM_VERSIONS" // comma list; default up to 1.0.0
	fakeFailEnv     = "FAKE_IPAM_FAIL"     // verbs that fail with code 999, comma-separated
	fakeHandlesEnv  = "FAKE_IPAM_HANDLES"  // "legacy": handle namespace.podname
)

var fakeNames = []string{"calico-ipam", "host-ipam"}

type fakeCall struct {
	Command     string          `json:"command"`
	ContainerID string          `json:"containerID"`
	IfName      string          `json:"ifName"`
	NetNS       string          `json:"netns"`
	Args        string          `json:"args"`
	Stdin       json.RawMessage `json:"stdin"`
}

// fakeState maps handles to the addresses they hold.
type fakeState struct {
	Next    int                 `json:"next"`
	Handles map[string][]string `json:"handles"`
}

func isFakeDelegate() bool {
	base := filepath.Base(os.Args[0])
	for _, n := range fakeNames {
		if base == n {
			return true
		}
	}
	return false
}

func runFakeDelegate() {
	versions := strings.Split(envOr(fakeVersionsEnv, "0.3.0,0.3.1,0.4.0,1.0.0"), ",")
	dir := os.Getenv(fakeDirEnv)
	logCall(dir)
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    func(a *skel.CmdArgs) error { return fakeAdd(dir, a) },
		Del:    func(a *skel.CmdArgs) error { return fakeDel(dir, a) },
		Check:  func(a *skel.CmdArgs) error { return fakeFail("CHECK") },
		GC:     func(a *skel.CmdArgs) error { return fakeFail("GC") },
		Status: func(a *skel.CmdArgs) error { return fakeFail("STATUS") },
	}, version.PluginSupports(versions...), "fake delegate")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fakeFail(verb string) error {
	if slices.Contains(strings.Split(os.Getenv(fakeFailEnv), ","), verb) {
		code := types.ErrInternal
		if verb == "STATUS" {
			code = types.ErrLimitedConnectivity
		}
		return types.NewError(code, "fake delegate fails "+verb, "")
	}
	return nil
}

func logCall(dir string) {
	stdin, _ := os.ReadFile("/dev/stdin")
	// skel reads stdin again; hand it back through a pipe.
	r, w, _ := os.Pipe()
	_, _ = w.Write(stdin)
	w.Close()
	os.Stdin = r
	if !json.Valid(stdin) {
		stdin = []byte("null")
	}
	call := fakeCall{Command: os.Getenv("CNI_COMMAND"), ContainerID: os.Getenv("CNI_CONTAINERID"), IfName: os.Getenv("CNI_IFNAME"), NetNS: os.Getenv("CNI_NETNS"), Args: os.Getenv("CNI_ARGS"), Stdin: stdin}
	line, _ := json.Marshal(call)
	f, err := os.OpenFile(filepath.Join(dir, "calls.jsonl"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err == nil {
		_, _ = f.Write(append(line, '\n'))
		f.Close()
	}
}

func fakeHandles(network string, a *skel.CmdArgs, add bool) []string {
	args, _ := cniargs.Parse(a.Args)
	ns, pod := args.Get(cniargs.PodNamespace), args.Get(cniargs.PodName)
	podHandle := a.ContainerID
	if ns != "" && pod != "" {
		podHandle = ns + "." + pod
	}
	if os.Getenv(fakeHandlesEnv) == "legacy" {
		return []string{podHandle}
	}
	if add {
		return []string{network + "." + a.ContainerID}
	}
	return []string{network + "." + a.ContainerID, podHandle}
}

func withState(dir string, fn func(*fakeState) error) error {
	lock, err := os.OpenFile(filepath.Join(dir, "state.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	st := fakeState{Handles: map[string][]string{}}
	if data, err := os.ReadFile(filepath.Join(dir, "state.json")); err == nil {
		if err := json.Unmarshal(data, &st); err != nil {
			return err
		}
	}
	if err := fn(&st); err != nil {
		return err
	}
	data, _ := json.Marshal(st)
	return os.WriteFile(filepath.Join(dir, "state.json"), data, 0o600)
}

func fakeAdd(dir string, a *skel.CmdArgs) error {
	if err := fakeFail("ADD"); err != nil {
		return err
	}
	conf, err := parseNetConf(a.StdinData)
	if err != nil {
		return err
	}
	var addr string
	err = withState(dir, func(st *fakeState) error {
		st.Next++
		addr = fmt.Sprintf("10.0.0.%d/24", st.Next)
		h := fakeHandles(conf.Name, a, true)[0]
		st.Handles[h] = append(st.Handles[h], addr)
		return nil
	})
	if err != nil {
		return err
	}
	ip, ipnet, _ := net.ParseCIDR(addr)
	ipnet.IP = ip
	res := &types100.Result{CNIVersion: types100.ImplementedSpecVersion, IPs: []*types100.IPConfig{{Address: *ipnet}}}
	return types.PrintResult(res, conf.CNIVersion)
}

func fakeDel(dir string, a *skel.CmdArgs) error {
	if err := fakeFail("DEL"); err != nil {
		return err
	}
	conf, err := parseNetConf(a.StdinData)
	if err != nil {
		return err
	}
	return withState(dir, func(st *fakeState) error {
		for _, h := range fakeHandles(conf.Name, a, false) {
			delete(st.Handles, h)
		}
		return nil
	})
}

func parseNetConf(data []byte) (*types.NetConf, error) {
	var conf types.NetConf
	if err := json.Unmarshal(data, &conf); err != nil {
		return nil, err
	}
	return &conf, nil
}
