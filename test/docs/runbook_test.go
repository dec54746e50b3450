package docs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	doc := strings.Join([]string{
		"# A runbook",  // 1
		"",             // 2
		"```sh skip",   // 3
		"make run",     // 4
		"```",          // 5
		"",             // 6
		"```text",      // 7: after a skipped block: not an expected output
		"ignored",      // 8
		"```",          // 9
		"```sh",        // 10
		"echo one",     // 11
		"```",          // 12
		"",             // 13
		"```text",      // 14
		"one",          // 15
		"```",          // 16
		"```sh exit=3", // 17
		"exit 3",       // 18
		"```",          // 19
		"Some prose.",  // 20
		"```text",      // 21: prose between: not an expected output
		"nothing",      // 22
		"```",          // 23
		"```sh",        // 24
		"true",         // 25
		"```",          // 26
		"```text",      // 27: an empty expected output
		"```",          // 28
		"```go",        // 29
		"package main", // 30
		"```",          // 31
		"```text",      // 32: after a block that does not run
		"x",            // 33
		"```",          // 34
		"## Later ##",  // 35: a heading, a section of its own
		"```sh",        // 36
		"# a comment",  // 37: in a block: not a heading
		"echo later",   // 38
		"```",          // 39
		"#hashtag",     // 40: not a heading either
		"```sh",        // 41
		"true",         // 42
		"```",          // 43
	}, "\n")
	blocks, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{Line: 10, Script: "echo one\n", Output: []string{"one"}, OutputLine: 14, Section: "A runbook", SectionLine: 1},
		{Line: 17, Script: "exit 3\n", Exit: 3, Section: "A runbook", SectionLine: 1},
		{Line: 24, Script: "true\n", Output: []string{}, OutputLine: 27, Section: "A runbook", SectionLine: 1},
		{Line: 36, Script: "# a comment\necho later\n", Section: "Later", SectionLine: 35},
		{Line: 41, Script: "true\n", Section: "Later", SectionLine: 35},
	}
	if diff := cmp.Diff(want, blocks); diff != "" {
		t.Errorf("blocks (-want +got):\n%s", diff)
	}
}

func TestSections(t *testing.T) {
	blocks := []Block{
		{Line: 2}, // before the first heading
		{Line: 5, Section: "A", SectionLine: 4},
		{Line: 9, Section: "A", SectionLine: 4},
		{Line: 12, Section: "B", SectionLine: 11},
		{Line: 20, Section: "B", SectionLine: 18}, // another heading B: another section
		{Line: 30, Section: "C", SectionLine: 25},
	}
	var got [][]int
	for _, section := range Sections(blocks) {
		var lines []int
		for _, b := range section {
			lines = append(lines, b.Line)
		}
		got = append(got, lines)
	}
	if want := [][]int{{2}, {5, 9}, {12}, {20}, {30}}; !cmp.Equal(want, got) {
		t.Errorf("Sections: the blocks of lines %v, want %v", got, want)
	}
	if got := Sections(nil); len(got) != 0 {
		t.Errorf("Sections(nil) = %v, want none", got)
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		name, doc, err string
	}{
		{"no blocks", "# Nothing\n\n```text\nout\n```\n", "no ```sh blocks"},
		{"only skipped blocks", "```sh skip\nmake run\n```\n", "no ```sh blocks"},
		{"an unknown attribute", "```sh exit:68\ntrue\n```\n", `unknown attribute "exit:68"`},
		{"a bad exit status", "```sh exit=x\ntrue\n```\n", `"exit=x"`},
		{"an unclosed fence", "```sh\ntrue\n", "line 1: the code block is not closed"},
		{"an empty block", "```sh\n```\n", "line 1: empty sh block"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("Parse: %v, want an error with %q", err, tt.err)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	vars := map[string]string{"NS": "docs-1"}
	tests := []struct {
		name     string
		expected []string
		output   string
		ok       bool
	}{
		{"equal", []string{"a", "b"}, "a\nb\n", true},
		{"a line differs", []string{"a", "b"}, "a\nc\n", false},
		{"a line more", []string{"a"}, "a\nb\n", false},
		{"a line less", []string{"a", "b"}, "a\n", false},
		{"white space", []string{"  1)  {", "x y"}, "  1)\t{\nx   y  \n\n", true},
		{"an empty expected output", []string{}, "", true},
		{"an empty expected output, output", []string{}, "x\n", false},
		{"... within a line", []string{`"resumeToken": "...",`}, `"resumeToken": "AQANY29u",` + "\n", true},
		{"... within a line, wrong rest", []string{`"resumeToken": "...",`}, `"resumeToken": "AQANY29u"` + "\n", false},
		{"... within a line is not a line", []string{"a...", "c"}, "a\nb\nc\n", false},
		{"... as a line, no lines", []string{"a", "...", "b"}, "a\nb\n", true},
		{"... as a line, lines", []string{"a", "...", "b"}, "a\nx\ny\nb\n", true},
		{"... as a line, at the end", []string{"a", "..."}, "a\nx\n", true},
		{"... as a line, backtracking", []string{"...", "b", "c"}, "b\nx\nb\nc\n", true},
		{"$NS", []string{"in namespace $NS"}, "in namespace docs-1\n", true},
		{"$NS, other value", []string{"in namespace $NS"}, "in namespace docs-2\n", false},
		{"regexp characters are literal", []string{"a.c (x)*"}, "a.c (x)*\n", true},
		{"regexp characters are literal, mismatch", []string{"a.c"}, "abc\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Match(tt.expected, tt.output, vars)
			if (err == nil) != tt.ok {
				t.Fatalf("Match(%q, %q) = %v, want ok=%v", tt.expected, tt.output, err, tt.ok)
			}
		})
	}
}

func TestMatchSaysWhere(t *testing.T) {
	err := Match([]string{"{", `  "type": "EVENT_TYPE_ADDED",`, "}"}, "{\n  \"type\": \"EVENT_TYPE_DELETED\",\n}\n", nil)
	if err == nil || !strings.Contains(err.Error(), `output line 2, "\"type\": \"EVENT_TYPE_DELETED\","`) ||
		!strings.Contains(err.Error(), `expected line 2, "\"type\": \"EVENT_TYPE_ADDED\","`) {
		t.Fatalf("Match: %v", err)
	}
}

func TestShellCarriesStateFromBlockToBlock(t *testing.T) {
	work := t.TempDir()
	sh, err := NewShell(work, t.TempDir(), []string{"PATH=/usr/bin:/bin", "GIVEN=given"})
	if err != nil {
		t.Fatal(err)
	}
	run := func(script string) (string, int) {
		t.Helper()
		out, status, err := sh.Run(context.Background(), script, time.Minute)
		if err != nil {
			t.Fatalf("%s: %v\n%s", script, err, out)
		}
		return out, status
	}
	run(`PLAIN="a b"; export EXPORTED=x; GIVEN=changed; ARRAY=(1 2); greet() { echo "hi $1"; }; mkdir sub; cd sub; echo out; echo err >&2`)
	out, status := run(`echo "$PLAIN|$EXPORTED|$GIVEN|${ARRAY[1]}|$(greet you)|$(basename "$PWD")"; bash -c 'echo "child sees $EXPORTED"'`)
	if want := "a b|x|changed|2|hi you|sub\nchild sees x\n"; out != want || status != 0 {
		t.Errorf("second block: %q %d, want %q 0", out, status, want)
	}
	if out, status := run("echo before; false; echo after"); out != "before\n" || status != 1 {
		t.Errorf("a failing command: %q %d, want the block to stop there, with its status", out, status)
	}
	if out, status := run("false | true"); status != 1 {
		t.Errorf("a failing pipeline: %q %d, want status 1 (pipefail)", out, status)
	}
	if out, status := run("echo $UNSET"); status == 0 {
		t.Errorf("an unset variable: %q %d, want a failure (nounset)", out, status)
	}
	if out, _ := run(`echo "$PLAIN"`); out != "a b\n" {
		t.Errorf("after failed blocks: %q, want the state of the last one that ended", out)
	}
	if _, _, err := sh.Run(context.Background(), "sleep 60 &", time.Minute); err == nil || !strings.Contains(err.Error(), "left processes running") {
		t.Errorf("a block that leaves a process running: %v", err)
	}
	start := time.Now()
	if _, _, err := sh.Run(context.Background(), "sleep 60", 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not end") {
		t.Errorf("a block that does not end: %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("a block that does not end was killed after %v", d)
	}
}
