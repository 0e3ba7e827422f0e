package admin

import (
	"bytes"
	"encoding/json"
	"testing"
)

// Issue 20, finding 5: what an admin command prints for a person carries
// no control character but tab and newline, and JSON stays JSON.
func TestForPeople(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   string
	}{
		{"plain text and table layout", []string{"FILE\tNODE\nnet1\tnode-é\n"}, "FILE\tNODE\nnet1\tnode-é\n"},
		{"ESC from an ifname", []string{"e\x1b[2J\x1b[31m\n"}, `e\u001b[2J\u001b[31m` + "\n"},
		{"carriage return, DEL, NUL", []string{"a\rb\x7fc\x00\n"}, `a\u000db\u007fc\u0000` + "\n"},
		{"a C1 control (CSI)", []string{"x\u009b31m\n"}, `x\u009b31m` + "\n"},
		{"bytes that are not UTF-8", []string{"a\xffb\n"}, `a\xffb` + "\n"},
		{"a rune split across writes", []string{"caf\xc3", "\xa9\n"}, "café\n"},
		// Issue 33, finding 8: a name that reads as another.
		{"a bidi override", []string{"web-\u202e0-bew\n"}, `web-\u202e0-bew` + "\n"},
		{"zero-width characters", []string{"eth\u200b0 n\u200dode\ufeff\n"}, `eth\u200b0 n\u200dode\ufeff` + "\n"},
		{"a bidi isolate and a line separator", []string{"a\u2066b\u2028c\n"}, `a\u2066b\u2028c` + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			w := ForPeople(&out)
			for _, s := range tt.writes {
				if n, err := w.Write([]byte(s)); err != nil || n != len(s) {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if out.String() != tt.want {
				t.Fatalf("printed %q; want %q", out.String(), tt.want)
			}
		})
	}
}

// --json through the writer decodes to the same values, controls and all.
func TestForPeopleKeepsJSON(t *testing.T) {
	in := map[string]string{"ifname": "e\x1b[2J", "handle": "h\x7f\u009b\tx"}
	var out bytes.Buffer
	if err := json.NewEncoder(ForPeople(&out)).Encode(in); err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsAny(out.Bytes(), "\x1b\x7f") || bytes.Contains(out.Bytes(), []byte("\u009b")) {
		t.Fatalf("raw control in %q", out.String())
	}
	var back map[string]string
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back["ifname"] != in["ifname"] || back["handle"] != in["handle"] {
		t.Fatalf("JSON %q decodes to %q, %v; want %q", out.String(), back, err, in)
	}
}
