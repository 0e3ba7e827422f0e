package record

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/safe-ipam/safe-ipam/ipam/bounded"
)

// Owner is the process that wrote a pending or releasing record. While it
// runs, the record is an operation in flight, not one a crash left.
type Owner struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"` // process start time, clock ticks after boot
	Boot  string `json:"boot"`  // kernel boot ID: PIDs are reused after a reboot
}

// Self is the running process as an Owner.
func Self() *Owner {
	start, err := processStart(os.Getpid())
	if err != nil {
		return nil // no /proc: records carry no owner and count as crashed
	}
	return &Owner{PID: os.Getpid(), Start: start, Boot: bootID()}
}

// Alive says whether the owner still runs on this machine.
func (o *Owner) Alive() bool {
	if o == nil || o.Boot == "" || o.Boot != bootID() {
		return false
	}
	start, err := processStart(o.PID)
	return err == nil && start == o.Start
}

func bootID() string {
	b, err := bounded.Read("/proc/sys/kernel/random/boot_id", bounded.Name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// processStart reads field 22 of /proc/<pid>/stat. The command name
// before it may hold spaces and parentheses, so fields count from the
// last ')'.
func processStart(pid int) (uint64, error) {
	b, err := bounded.Read("/proc/"+strconv.Itoa(pid)+"/stat", bounded.Name)
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return 0, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}
