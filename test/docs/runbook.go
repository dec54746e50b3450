// Package docs runs the commands of the repository's Markdown documents
// against a real kube-apiserver and etcd (internal/controlplane) and the
// informerhub binary, and checks their exit status and output, so that the
// documents cannot rot.
//
// A document is a runbook: its ```sh blocks run in order, each in
// `bash -euo pipefail`, with the variables, functions and working directory
// the blocks before it left (see Shell). Fence attributes after the
// language say what a block is expected to do:
//
//	```sh            run it; it must exit 0
//	```sh exit=68    run it; it must exit 68
//	```sh skip       show it, but do not run it (set-up the test does itself, or
//	                 what needs more than the test has, like TLS)
//
// A ```text block that follows a block that runs, with nothing but blank
// lines between them, is its expected output: what it writes to stdout and
// stderr together. See Match for how output matches.
//
// A block belongs to the section of the heading above it: a recipe, which
// a reader may jump to (see Sections).
package docs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Block is a command block of a document.
type Block struct {
	// Line is the line of the block's opening fence, counting from 1.
	Line int
	// Script is the block's content, run by bash.
	Script string
	// Exit is the exit status the block must end with.
	Exit int
	// Output is the expected output, a line per element; nil when the
	// block has no ```text block after it, and its output is not checked.
	Output []string
	// OutputLine is the line of the expected output's opening fence.
	OutputLine int
	// Section is the text of the heading the block is under ("Resume" for
	// "### Resume"), and SectionLine that heading's line; "" and 0 for a
	// block before the first heading.
	Section     string
	SectionLine int
}

// Parse returns the blocks of a Markdown document that run, in order. It
// fails when the document has none (a test of nothing passes forever), or
// when a fence is not closed or has an attribute it does not know.
func Parse(src []byte) ([]Block, error) {
	type fence struct {
		line  int
		lang  string
		attrs []string
		body  []string
		// adjacent: only blank lines separate it from the fence before.
		adjacent bool
		// The heading above it, and the heading's line.
		section     string
		sectionLine int
	}
	var fences []fence
	var cur *fence
	between := false // something other than blank lines since the last fence
	section, sectionLine := "", 0
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch info, opens := strings.CutPrefix(line, "```"); {
		case cur != nil && strings.TrimSpace(line) == "```":
			fences = append(fences, *cur)
			cur, between = nil, false
		case cur != nil:
			cur.body = append(cur.body, line)
		case opens:
			words := strings.Fields(info)
			cur = &fence{line: n, adjacent: len(fences) > 0 && !between, section: section, sectionLine: sectionLine}
			if len(words) > 0 {
				cur.lang, cur.attrs = words[0], words[1:]
			}
		case strings.TrimSpace(line) != "":
			between = true
			if m := heading.FindStringSubmatch(line); m != nil {
				section, sectionLine = m[1], n
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cur != nil {
		return nil, fmt.Errorf("line %d: the code block is not closed", cur.line)
	}

	var blocks []Block
	runs := false // whether the fence before is a block that runs
	for _, f := range fences {
		switch f.lang {
		case "sh":
			b := Block{Line: f.line, Script: strings.Join(f.body, "\n") + "\n", Section: f.section, SectionLine: f.sectionLine}
			skip := false
			for _, a := range f.attrs {
				switch name, value, _ := strings.Cut(a, "="); name {
				case "skip":
					skip = true
				case "exit":
					code, err := strconv.Atoi(value)
					if err != nil || code < 0 || code > 255 {
						return nil, fmt.Errorf("line %d: %q: exit wants a status from 0 to 255", f.line, a)
					}
					b.Exit = code
				default:
					return nil, fmt.Errorf("line %d: unknown attribute %q of a sh block (known: exit=N, skip)", f.line, a)
				}
			}
			if strings.TrimSpace(b.Script) == "" && !skip {
				return nil, fmt.Errorf("line %d: empty sh block", f.line)
			}
			runs = !skip
			if runs {
				blocks = append(blocks, b)
			}
			continue
		case "text":
			if runs && f.adjacent {
				b := &blocks[len(blocks)-1]
				b.Output, b.OutputLine = f.body, f.line
				if b.Output == nil {
					b.Output = []string{}
				}
			}
		}
		runs = false
	}
	if len(blocks) == 0 {
		return nil, errors.New("the document has no ```sh blocks to run")
	}
	return blocks, nil
}

// heading is a Markdown ATX heading ("### Resume"): 1 to 6 #, then its
// text after white space, or nothing.
var heading = regexp.MustCompile(`^#{1,6}(?:[ \t]+(.*?))?[ \t#]*$`)

// Sections splits blocks (in a document's order) into sections: the runs of
// blocks under one heading.
func Sections(blocks []Block) [][]Block {
	var sections [][]Block
	for i, b := range blocks {
		if i == 0 || b.SectionLine != blocks[i-1].SectionLine {
			sections = append(sections, nil)
		}
		sections[len(sections)-1] = append(sections[len(sections)-1], b)
	}
	return sections
}

// Match checks output against the expected lines. Lines are compared with
// runs of white space (tabs included) as one space and leading and
// trailing white space ignored, and trailing empty lines dropped. In
// expected lines, a line that is just "..." matches any number of lines
// (none included), "..." within a line matches any text on that line, and
// each vars key preceded by "$" ("$NS") stands for its value.
func Match(expected []string, output string, vars map[string]string) error {
	want := make([]string, len(expected))
	for i, l := range expected {
		for k, v := range vars {
			l = strings.ReplaceAll(l, "$"+k, v)
		}
		want[i] = normalize(l)
	}
	want = trimEmpty(want)
	got := trimEmpty(splitLines(output))
	for i := range got {
		got[i] = normalize(got[i])
	}

	patterns := make([]*regexp.Regexp, len(want))
	for i, w := range want {
		if w == "..." {
			continue
		}
		parts := strings.Split(w, "...")
		for j := range parts {
			parts[j] = regexp.QuoteMeta(parts[j])
		}
		patterns[i] = regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
	}
	// match(i, j): want[i:] matches got[j:]. The furthest line of got that
	// some way of matching reached says where a mismatch is.
	type key struct{ i, j int }
	memo := map[key]bool{}
	furthest, furthestWant := 0, 0
	var match func(i, j int) bool
	match = func(i, j int) bool {
		if r, ok := memo[key{i, j}]; ok {
			return r
		}
		if j > furthest || (j == furthest && i > furthestWant) {
			furthest, furthestWant = j, i
		}
		var r bool
		switch {
		case i == len(want):
			r = j == len(got)
		case patterns[i] == nil:
			for k := j; k <= len(got) && !r; k++ {
				r = match(i+1, k)
			}
		default:
			r = j < len(got) && patterns[i].MatchString(got[j]) && match(i+1, j+1)
		}
		memo[key{i, j}] = r
		return r
	}
	if match(0, 0) {
		return nil
	}
	gotLine, wantLine := "(the output ends)", "(the expected output ends)"
	if furthest < len(got) {
		gotLine = strconv.Quote(got[furthest])
	}
	if furthestWant < len(want) {
		wantLine = strconv.Quote(want[furthestWant])
	}
	return fmt.Errorf("the output does not match the expected output: output line %d, %s, does not match expected line %d, %s",
		furthest+1, gotLine, furthestWant+1, wantLine)
}

func normalize(line string) string { return strings.Join(strings.Fields(line), " ") }

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

func trimEmpty(lines []string) []string {
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// Shell runs blocks one after the other, each in a bash process of its own,
// as if they ran in one shell: what a block leaves (variables, exported or
// not; functions; the working directory) the next one starts with.
// Background jobs do not carry over: a block waits for what it starts.
type Shell struct {
	env     []string
	dir     string // where the first block starts
	private string // the state carried from block to block, and outputs
}

// NewShell returns a shell whose first block starts in dir with env
// (KEY=value pairs) as its environment. It keeps what it needs in private,
// a directory of its own.
func NewShell(dir, private string, env []string) (*Shell, error) {
	if err := os.WriteFile(filepath.Join(private, "state.sh"), nil, 0o600); err != nil {
		return nil, err
	}
	return &Shell{env: env, dir: dir, private: private}, nil
}

// prologue and epilogue wrap each block, in what bash 3.2 (macOS) has too.
// The prologue notes the variables a fresh bash has (the environment,
// bash's own), then restores the state; the epilogue, an EXIT trap, saves
// the exported variables, the variables the blocks made, the functions and
// the working directory, and exits with the block's status. Read-only
// variables are bash's own, never saved.
const prologue = `compgen -v >"$__RUNBOOK_STATE.fresh"
. "$__RUNBOOK_STATE"
__runbook_save() {
	local __runbook_status=$1 __runbook_v __runbook_f
	{
		{
			export -p
			for __runbook_v in $(compgen -v | grep -vxF -f "$__RUNBOOK_STATE.fresh" || true); do
				case $__runbook_v in __runbook_*) ;; *) declare -p -- "$__runbook_v" ;; esac
			done
		} | grep -v '^declare -[a-zA-Z]*r' || true
		for __runbook_f in $(compgen -A function); do
			case $__runbook_f in __runbook_*) ;; *) declare -f -- "$__runbook_f" ;; esac
		done
		printf 'cd -- %q\n' "$PWD"
	} >"$__RUNBOOK_STATE.new" && mv -f -- "$__RUNBOOK_STATE.new" "$__RUNBOOK_STATE"
	exit "$__runbook_status"
}
trap '__runbook_save $?' EXIT
`

// Run runs a block and returns its output (stdout and stderr together, in
// the order written) and exit status. err is set when the block could not
// run, did not end within timeout (it is then killed), or left processes
// running.
func (s *Shell) Run(ctx context.Context, script string, timeout time.Duration) (output string, status int, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A file, not a pipe: a background process the block leaves behind
	// must not keep Wait waiting for the end of its output.
	out, err := os.CreateTemp(s.private, "output-")
	if err != nil {
		return "", 0, err
	}
	defer os.Remove(out.Name())
	defer out.Close()

	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-euo", "pipefail", "-c", prologue+script, "runbook")
	cmd.Dir = s.dir
	cmd.Env = append(append([]string{}, s.env...), "__RUNBOOK_STATE="+filepath.Join(s.private, "state.sh"))
	cmd.Stdout, cmd.Stderr = out, out
	// A process group of its own, so that every process the block started
	// can be killed with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	runErr := cmd.Run()
	if cmd.Process != nil && syscall.Kill(-cmd.Process.Pid, 0) == nil {
		// Whatever is still in the group outlived the block.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err = errors.New("the block left processes running: wait for what it starts in the background")
	}
	data, readErr := os.ReadFile(out.Name())
	if readErr != nil {
		return "", 0, readErr
	}
	output = string(data)
	if ctx.Err() != nil {
		return output, -1, fmt.Errorf("the block did not end within %v", timeout)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(runErr, &exit):
		status = exit.ExitCode()
	case runErr != nil:
		return output, -1, runErr
	}
	return output, status, err
}
