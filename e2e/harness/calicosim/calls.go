package calicosim

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// EnvCallLog names a file the simulator's binary appends one line to per
// ADD and DEL it runs as calico-ipam, saying who ran it: how the suites
// count the calls that reached Calico without passing through safe-ipam
// (issue 46).
const EnvCallLog = "CALICO_SIM_CALL_LOG"

// takenOverName is safe-ipam's name in takeover mode: Calico's
// calico-ipam.
const takenOverName = "calico-ipam"

// Call is one line of the call log.
type Call struct {
	Verb        string `json:"verb"`
	ContainerID string `json:"containerID"`
	// Caller is the base name of the program that ran calico-ipam, as
	// /proc names its executable: safe-ipam's (safe-ipam, safe-ipam-etcd,
	// calico-ipam in takeover mode, safe-ipam-admin for gc's releases), or
	// Calico's main plugin (calico).
	Caller string `json:"caller"`
}

// Guarded says whether safe-ipam ran the call.
func (c Call) Guarded() bool {
	switch c.Caller {
	case builds.CNIBinary, builds.EtcdBinary, builds.AdminBinary, takenOverName:
		return true
	}
	return false
}

// LogCall appends this process's call to the log EnvCallLog names, if
// any. A call log that cannot be written fails the call: a count that
// misses calls would pass for none unguarded.
func LogCall(getenv func(string) string) error {
	path, verb := getenv(EnvCallLog), getenv("CNI_COMMAND")
	if path == "" || (verb != "ADD" && verb != "DEL") {
		return nil
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(os.Getppid()) + "/exe")
	if err != nil {
		return fmt.Errorf("%s: who runs calico-ipam: %w", EnvCallLog, err)
	}
	line, err := json.Marshal(Call{Verb: verb, ContainerID: getenv("CNI_CONTAINERID"), Caller: filepath.Base(strings.TrimSuffix(exe, " (deleted)"))})
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w", EnvCallLog, err)
	}
	// One write of one short line: O_APPEND keeps concurrent calls' lines whole.
	_, err = f.Write(append(line, '\n'))
	return errors.Join(err, f.Close())
}

// ReadCalls reads a call log; a missing one holds no calls.
func ReadCalls(path string) ([]Call, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var calls []Call
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var c Call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, sc.Text(), err)
		}
		calls = append(calls, c)
	}
	return calls, sc.Err()
}
