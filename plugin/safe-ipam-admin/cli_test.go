package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/safe-ipam/safe-ipam/ipam/about"
	"github.com/safe-ipam/safe-ipam/ipam/builds"
)

// commands are every admin command, as the overview lists them.
var commands = func() []string {
	var names []string
	for _, c := range about.Commands {
		names = append(names, c.Name)
	}
	return names
}()

// The one command table: the overview lists every command the admin
// binary runs, and it runs every one the overview lists.
func TestEveryCommandRuns(t *testing.T) {
	if len(commands) < 7 || len(runners) != len(commands) {
		t.Fatalf("the overview lists %v; the admin binary runs %d commands", commands, len(runners))
	}
	for _, name := range commands {
		if runners[name] == nil {
			t.Errorf("the overview lists %s, which the admin binary does not run", name)
		}
		if !strings.Contains(about.Usage, "safe-ipam "+name+" ") {
			t.Errorf("the overview does not show %s", name)
		}
	}
}

func runAdmin(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "safe-ipam-admin"), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &exit):
		return out.String(), exit.ExitCode()
	}
	t.Fatal(err)
	return "", 0
}

// Issue 22: one CLI vocabulary. Every command's --help says "Usage:",
// ends its text with an example, and spells its flags --flag, as the
// docs do; the same thing has the same flag name everywhere.
func TestEveryCommandsHelpFollowsTheConvention(t *testing.T) {
	singleDash := regexp.MustCompile(`(?m)^  -[a-z]`)
	for _, name := range commands {
		t.Run(name, func(t *testing.T) {
			out, code := runAdmin(t, name, "--help")
			if code != 0 {
				t.Fatalf("exit %d:\n%s", code, out)
			}
			if !strings.HasPrefix(out, "Usage: safe-ipam "+name) {
				t.Errorf("help does not start with %q:\n%s", "Usage: safe-ipam "+name, out)
			}
			if !strings.Contains(out, "Example: safe-ipam "+name) {
				t.Errorf("help has no example of %s:\n%s", name, out)
			}
			if singleDash.MatchString(out) || !strings.Contains(out, "\n  --") {
				t.Errorf("flags are not spelled --flag:\n%s", out)
			}
			if strings.Contains(out, "\n  --cni-path ") && !strings.Contains(out, "\n  --cni-bin-dir ") {
				t.Error("--cni-path without --cni-bin-dir, the name every command uses for the bin dir")
			}
		})
	}
}

// Issue 22: errors name the fix, once, without the whole usage.
func TestUsageErrorsNameTheFix(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"repair", "--dry-run"}, "unless --apply is given"},
		{[]string{"install", "--apply"}, "unless --dry-run is given"},
		{[]string{"gc", "--conf", "/x.conflist", "--every", "5"}, "--every=5m"},
		{[]string{"audit", "--min-age", "5"}, "--min-age=5m"},
		{[]string{"gc", "/etc/cni/net.d/10-calico.conflist"}, "--conf=/etc/cni/net.d/10-calico.conflist"},
		{[]string{"install", "--mod=takeover"}, "unknown flag --mod"},
		{[]string{"install", "--metrics-addr=:9253"}, "--metrics-addr needs --watch"},
		{[]string{"gc", "--conf", "/x.conflist", "--dead-nodes", "--every=5m", "--metrics-addr=9254"}, "want host:port or :port"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, code := runAdmin(t, tt.args...)
			if code != 2 || !strings.Contains(out, tt.want) {
				t.Fatalf("exit %d:\n%s\nwant exit 2 saying %q", code, out, tt.want)
			}
			if strings.Contains(out, "Flags:") || strings.Count(out, "\n") > 2 {
				t.Errorf("a usage error prints more than the error and where to read more:\n%s", out)
			}
			if !strings.Contains(out, "safe-ipam "+tt.args[0]+" --help") {
				t.Errorf("no pointer to --help:\n%s", out)
			}
		})
	}
}

// Issue 22: help says what the code does. gc and doctor read a CNI cache
// only when given, so show no default for it; a NOTREADY sandbox counts
// as running; --conf decides the datastore, so no fixed default shows.
func TestHelpMatchesTheCode(t *testing.T) {
	tests := []struct {
		cmd, flag, want, notWant string
	}{
		{"gc", "--cni-cache", "read only when given", `(default "/var/lib/cni/results")`},
		{"doctor", "--cni-cache", "read only when given", `(default "/var/lib/cni/results")`},
		{"audit", "--cni-cache", `(default "/var/lib/cni/results")`, "read only when given"},
		{"gc", "--cri-endpoint", "NOTREADY", ""},
		{"audit", "--datastore", "as calico-ipam infers it from --conf", `(default "etcdv3")`},
	}
	for _, tt := range tests {
		out, _ := runAdmin(t, tt.cmd, "--help")
		_, help, _ := strings.Cut(out, "\n  "+tt.flag+" ")
		help, _, _ = strings.Cut(help, "\n  --")
		if !strings.Contains(help, tt.want) || tt.notWant != "" && strings.Contains(help, tt.notWant) {
			t.Errorf("%s %s help %q; want %q, not %q", tt.cmd, tt.flag, help, tt.want, tt.notWant)
		}
	}
}

// Issue 22: every flag the docs give a command exists in that command:
// each "safe-ipam <command> ... --flag" on one line of the README or
// docs/, up to the end of its code span or line.
func TestDocumentedFlagsExist(t *testing.T) {
	helps := map[string]string{}
	for _, name := range commands {
		helps[name], _ = runAdmin(t, name, "--help")
	}
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	use := regexp.MustCompile("safe-ipam (" + strings.Join(commands, "|") + `)\b([^` + "`" + `\n]*)`)
	flagRe := regexp.MustCompile(`(?:^|\s)--([a-z][a-z0-9-]*)`)
	checked := 0
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range use.FindAllStringSubmatch(string(data), -1) {
			cmd, rest := m[1], m[2]
			if i := strings.Index(rest, "safe-ipam "); i >= 0 {
				rest = rest[:i] // the next command's flags are its own
			}
			for _, f := range flagRe.FindAllStringSubmatch(rest, -1) {
				checked++
				if f[1] != "help" && !strings.Contains(helps[cmd], "\n  --"+f[1]+" ") && !strings.Contains(helps[cmd], "\n  --"+f[1]+"\n") {
					t.Errorf("%s: safe-ipam %s --%s: no such flag", filepath.Base(file), cmd, f[1])
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d documented flags found: the pattern no longer matches the docs", checked)
	}
}

// Issue 44, item 7: each build names itself in its version line, so an
// operator can tell which one a node runs (all three said "safe-ipam").
func TestEachBuildNamesItselfInItsVersion(t *testing.T) {
	for _, name := range []string{builds.CNIBinary, builds.EtcdBinary, builds.AdminBinary} {
		cmd := exec.Command(filepath.Join(binDir, name), "version")
		cmd.Env = append(os.Environ(), "CNI_COMMAND=")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s version: %v", name, err)
		}
		if !strings.HasPrefix(string(out), name+" ") || !strings.Contains(string(out), "(CNI ") {
			t.Errorf("%s version printed %q; want its own name, its version and the CNI versions", name, out)
		}
	}
}
