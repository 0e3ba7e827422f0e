// Package docs checks that README.md and docs/*.md can be followed as
// written: every relative link and anchor resolves, and every
// `safe-ipam ...` command line of a fenced block parses with the flags
// the built binary accepts (checked with --help, which runs nothing).
package docs

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository, from this package's directory.
const root = "../.."

// page is one Markdown file: its lines, and which of them are inside a
// fenced code block.
type page struct {
	path   string
	lines  []string
	fenced []bool
}

func pages(t *testing.T) []*page {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*page
	for _, path := range append([]string{filepath.Join(root, "README.md")}, paths...) {
		out = append(out, readPage(t, path))
	}
	return out
}

func readPage(t *testing.T, path string) *page {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p := &page{path: path, lines: strings.Split(string(b), "\n")}
	in := false
	for _, l := range p.lines {
		fence := strings.HasPrefix(strings.TrimSpace(l), "```")
		p.fenced = append(p.fenced, in || fence)
		if fence {
			in = !in
		}
	}
	return p
}

func (p *page) name() string { return strings.TrimPrefix(p.path, root+"/") }

var (
	heading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	link     = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan = regexp.MustCompile("`[^`]*`")
	inline   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	nonWord  = regexp.MustCompile(`[^\p{L}\p{M}\p{N}\p{Pc}\- ]`)
)

// anchors are the ids GitHub gives the page's headings: lower case,
// punctuation other than '-' and '_' dropped, spaces as '-', and a
// repeated one suffixed -1, -2, ...
func (p *page) anchors() map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for i, l := range p.lines {
		m := heading.FindStringSubmatch(l)
		if m == nil || p.fenced[i] {
			continue
		}
		text := inline.ReplaceAllString(m[1], "$1")
		slug := strings.ReplaceAll(nonWord.ReplaceAllString(strings.ToLower(text), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// Every relative link of README.md and docs/*.md names a file that
// exists, and its #anchor a heading of that file.
func TestRelativeLinksResolve(t *testing.T) {
	byPath := map[string]*page{}
	all := pages(t)
	for _, p := range all {
		byPath[filepath.Clean(p.path)] = p
	}
	for _, p := range all {
		for i, l := range p.lines {
			if p.fenced[i] {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(codeSpan.ReplaceAllString(l, ""), -1) {
				if err := resolve(p, m[1], byPath); err != nil {
					t.Errorf("%s:%d: link %s: %v", p.name(), i+1, m[1], err)
				}
			}
		}
	}
}

func resolve(p *page, target string, byPath map[string]*page) error {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return nil
	}
	file, anchor, _ := strings.Cut(target, "#")
	path := filepath.Clean(p.path)
	if file != "" {
		path = filepath.Clean(filepath.Join(filepath.Dir(p.path), file))
		if _, err := os.Stat(path); err != nil {
			return errors.New("no such file")
		}
	}
	if anchor == "" || !strings.HasSuffix(path, ".md") {
		return nil
	}
	to := byPath[path]
	if to == nil {
		return fmt.Errorf("%s is not README.md or docs/*.md, whose anchors are checked", path)
	}
	if !to.anchors()[anchor] {
		return fmt.Errorf("%s has no heading with the anchor #%s", filepath.Base(path), anchor)
	}
	return nil
}

// A documented command line: where, and its words after `safe-ipam`.
type commandLine struct {
	where string
	words []string
}

var (
	// prompt, sudo and environment assignments before the command.
	lead    = regexp.MustCompile(`^(\$\s+)?(sudo\s+)?([A-Z_][A-Z0-9_]*=\S*\s+)*`)
	command = regexp.MustCompile(`^(\./)?(bin/)?safe-ipam\s`)
	comment = regexp.MustCompile(`\s#.*$`)
)

// commands are the `safe-ipam ...` lines of the fenced blocks, with
// their continuation lines, comments dropped, and an optional
// [--flag] taken as given.
func commands(t *testing.T) []commandLine {
	t.Helper()
	var out []commandLine
	for _, p := range pages(t) {
		for i := 0; i < len(p.lines); i++ {
			l := lead.ReplaceAllString(strings.TrimSpace(p.lines[i]), "")
			if !p.fenced[i] || !command.MatchString(l) {
				continue
			}
			where := fmt.Sprintf("%s:%d", p.name(), i+1)
			for strings.HasSuffix(l, `\`) && i+1 < len(p.lines) {
				i++
				l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(p.lines[i])
			}
			l = comment.ReplaceAllString(l, "")
			words := strings.Fields(strings.NewReplacer("[", "", "]", "").Replace(l))
			out = append(out, commandLine{where: where, words: words[1:]})
		}
	}
	return out
}

// build builds the three binaries (safe-ipam hands admin commands to
// safe-ipam-admin beside it) into a temp dir.
func build(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+"/", "./plugin/safe-ipam", "./plugin/safe-ipam-etcd", "./plugin/safe-ipam-admin")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "safe-ipam")
}

// Every `safe-ipam ...` command line of a fenced block in README.md and
// docs/*.md parses with the flags the binary accepts: its command
// exists, each flag is one the command declares, each value parses as
// the flag's type, and nothing is left over. The binary itself parses
// each line, with --help after its flags, so nothing runs: help is
// printed once every flag before it parsed, and a flag that does not
// parse fails first.
func TestDocumentedCommandsParse(t *testing.T) {
	bin := build(t)
	lines := commands(t)
	if len(lines) < 10 {
		t.Fatalf("only %d safe-ipam command lines found in the docs; the scan is broken", len(lines))
	}
	flags := map[string]map[string]bool{}
	for _, c := range lines {
		if len(c.words) == 0 {
			t.Errorf("%s: safe-ipam without a command", c.where)
			continue
		}
		sub := c.words[0]
		if sub == "version" || sub == "help" {
			continue
		}
		if flags[sub] == nil {
			declared, err := declaredFlags(bin, sub)
			if err != nil {
				t.Errorf("%s: safe-ipam %s: %v", c.where, sub, err)
				continue
			}
			flags[sub] = declared
		}
		if err := checkWords(flags[sub], c.words[1:]); err != nil {
			t.Errorf("%s: safe-ipam %s: %v", c.where, strings.Join(c.words, " "), err)
			continue
		}
		out, err := run(bin, append(c.words, "--help")...)
		if err != nil || !strings.HasPrefix(out, "Usage:") {
			t.Errorf("%s: safe-ipam %s does not parse: %v\n%s", c.where, strings.Join(c.words, " "), err, out)
		}
	}
}

// declaredFlags are the flags `safe-ipam sub --help` lists, each with
// whether it takes a value (a bool flag does not).
func declaredFlags(bin, sub string) (map[string]bool, error) {
	out, err := run(bin, sub, "--help")
	if err != nil || !strings.HasPrefix(out, "Usage:") {
		return nil, fmt.Errorf("no such command (%v): %s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  --?([\w-]+)( \S+)?$`).FindAllStringSubmatch(out, -1) {
		flags[m[1]] = m[2] != ""
	}
	if len(flags) == 0 {
		return nil, fmt.Errorf("--help lists no flags:\n%s", out)
	}
	return flags, nil
}

// checkWords walks the words as Go's flag package does and fails on a
// flag the command does not declare, a missing value, or a word left
// over (the binary would stop parsing there, and --help after it would
// not be read).
func checkWords(flags map[string]bool, words []string) error {
	for i := 0; i < len(words); i++ {
		w := words[i]
		if !strings.HasPrefix(w, "-") || w == "-" || w == "--" {
			return fmt.Errorf("%q is not a flag: the command takes none but flags", w)
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
		takesValue, ok := flags[name]
		switch {
		case !ok:
			return fmt.Errorf("flag --%s is not one the command accepts (%v)", name, slices.Sorted(maps.Keys(flags)))
		case takesValue && !hasValue:
			if i+1 == len(words) {
				return fmt.Errorf("flag --%s needs a value", name)
			}
			i++
		}
	}
	return nil
}

// run runs the binary as an operator would, with no CNI_COMMAND (an
// admin command, not a CNI call).
func run(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "CNI_") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Issue 44, item 11: docs/install.md's table of install's flags names
// every flag `safe-ipam install --help` lists, and no other (six were
// missing from its list).
func TestInstallFlagsTableMatchesHelp(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "| `safe-ipam install` flag |")
	if !ok {
		t.Fatal("docs/install.md has no table of safe-ipam install's flags")
	}
	if end := strings.Index(table, "\n\n"); end >= 0 {
		table = table[:end]
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(table, "\n")[2:] {
		cells := strings.Split(line, "|")
		if len(cells) < 3 {
			continue
		}
		for _, m := range regexp.MustCompile("`--([a-z][a-z0-9-]*)`").FindAllStringSubmatch(cells[1], -1) {
			documented[m[1]] = true
		}
	}
	declared, err := declaredFlags(build(t), "install")
	if err != nil {
		t.Fatal(err)
	}
	for f := range declared {
		if f != "h" && f != "help" && !documented[f] {
			t.Errorf("safe-ipam install --%s is not in docs/install.md's table of its flags", f)
		}
	}
	for f := range documented {
		if _, ok := declared[f]; !ok {
			t.Errorf("docs/install.md's table names --%s, which safe-ipam install does not take", f)
		}
	}
	if len(documented) < 10 {
		t.Fatalf("found %d flags in the table: the scan is broken", len(documented))
	}
}
