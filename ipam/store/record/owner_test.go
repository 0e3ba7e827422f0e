package record

import (
	"os/exec"
	"testing"
)

func TestOwnerAlive(t *testing.T) {
	self := Self()
	if self == nil || !self.Alive() {
		t.Fatalf("the running process is not alive: %+v", self)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := &Owner{PID: cmd.Process.Pid, Start: self.Start, Boot: self.Boot}
	if gone.Alive() {
		t.Errorf("an exited process is alive: %+v", gone)
	}
	for _, o := range []*Owner{nil, {PID: self.PID, Start: self.Start + 1, Boot: self.Boot}, {PID: self.PID, Start: self.Start, Boot: "other-boot"}} {
		if o.Alive() {
			t.Errorf("%+v counts as alive", o)
		}
	}
}
