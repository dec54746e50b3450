package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

// hostile is a Role's name (validated only as a path segment) that, printed
// raw, turns the terminal red and forges a row of a watch's table.
const hostile = "evil\x1b[31m\nADDED\tkube-system\tadmin\t1\t5y"

func TestEscapeCell(t *testing.T) {
	for in, want := range map[string]string{
		"web-0":                  "web-0",
		"":                       "",
		"red\x1b[31m":            "red^[[31m", // kubectl: test1\x1b -> test1^[
		"first\n line":           "first...",  // kubectl: cut at the newline, "..." appended
		"a\rb":                   "a...",
		"a\fb":                   "a...", // tabwriter's other newline
		"a\x1b\nb\x1b":           "a^[...",
		"a\tb\tc":                `a\tb\tc`, // beyond kubectl: a tab would start a column
		"é\u00a0漢字":              "é\u00a0漢字",
		hostile:                  "evil^[[31m...",
		"\n":                     "...",
		"tab\tthen\rcr\x1b[0m":   `tab\tthen...`,
		"no break\x1b]0;title\a": "no break^[]0;title\a", // as kubectl: only ESC and \r are escaped
	} {
		if got := escapeCell(in); got != want {
			t.Errorf("escapeCell(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"plain":                "plain",
		"a\x1b[2Jb\rc":         `a^[[2Jb\rc`,
		"line one\n  ^ caret":  "line one\n  ^ caret", // lines kept
		"\x1b\x1b\r\r":         `^[^[\r\r`,
		"tab\tkept in a block": "tab\tkept in a block",
	} {
		if got := escapeTerminal(in); got != want {
			t.Errorf("escapeTerminal(%q) = %q, want %q", in, got, want)
		}
	}
}

// noControls fails t if out holds ESC, \r or \f.
func noControls(t *testing.T, what, out string) {
	t.Helper()
	if strings.ContainsAny(out, "\x1b\r\f") {
		t.Errorf("%s holds a terminal control character: %q", what, out)
	}
}

// TestHostileNamesInTables: whatever a name holds, a table has the rows
// of its objects, each on one line, in its columns: the hostile name is
// cut at its newline and its ESC escaped, as kubectl does.
func TestHostileNamesInTables(t *testing.T) {
	var out bytes.Buffer
	tbl := newTable(&out, "NAME", "AGE")
	tbl.row(hostile, "1s")
	tbl.row("tab\there", "2s")
	tbl.row("web-0", "3s")
	if err := tbl.flush(); err != nil {
		t.Fatal(err)
	}
	want := "NAME            AGE\n" +
		"evil^[[31m...   1s\n" +
		`tab\there       2s` + "\n" +
		"web-0           3s\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

func TestHostileNamesInAWatch(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return created.Add(90 * time.Second) }
	role := func(typ hubclient.EventType, name, rv, spec string) hubclient.Event {
		return hubclient.Event{Type: typ, ResourceVersion: rv, ResumeToken: "t" + rv,
			Object: fmt.Appendf(nil, `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":%s,"namespace":"demo","resourceVersion":%q,"creationTimestamp":"2026-01-01T00:00:00Z"},"spec":%s}`, jsonString(name), rv, spec)}
	}
	added := role(hubclient.Added, hostile, "1", `{}`)
	// A key of a preserve-unknown-fields spec, and a value.
	modified := role(hubclient.Modified, hostile, "2", `{"x\u001b[2J\nFORGED":"v","note":"a\u001b[31m\nb"}`)
	modified.Previous = added.Object
	filtered := role(hubclient.Added, "w\x1b]0;owned\a", "3", `{}`)
	filtered.FilterError = "no such key: k\x1b[31m\nADDED\tforged"

	var stdout, stderr bytes.Buffer
	p := eventPrinter{printer: &printer{stdout: &stdout, stderr: &stderr, now: now}, namespace: "demo"}
	for _, e := range []hubclient.Event{added, modified, filtered} {
		if err := p.print(e, "", e.ResumeToken, false); err != nil {
			t.Fatal(err)
		}
	}
	want := "EVENT         NAME            RESOURCEVERSION   AGE\n" +
		"ADDED         evil^[[31m...   1                 90s\n" +
		"MODIFIED      evil^[[31m...   2                 90s\n" +
		`              + spec.note: "a\u001b[31m\nb"` + "\n" + // a value: JSON, escaped
		`              + spec["x^[[2J...` + "\n" + // a key: cut, escaped
		"ADDED?        w^[]0;owned\a    3                 90s\n"
	if diff := cmp.Diff(want, stdout.String()); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	wantErr := "(the filter could not decide on demo/w^[]0;owned\a, sent as if it matched: no such key: k^[[31m...)\n"
	if diff := cmp.Diff(wantErr, stderr.String()); diff != "" {
		t.Errorf("stderr (-want +got):\n%s", diff)
	}
	noControls(t, "stdout", stdout.String())
	noControls(t, "stderr", stderr.String())
}

// TestHostileKeysInDiffs: the keys of a preserve-unknown-fields spec are
// the tenant's; a diff line names them in its path, escaped as a cell.
func TestHostileKeysInDiffs(t *testing.T) {
	before := `{"spec":{"a":1}}`
	after := `{"spec":{"a":1,"k\u001b[31m\nADDED\tforged":"v","tab\tkey":2,"cr\rkey":3}}`
	changes, err := diffObjects([]byte(before), []byte(after), false)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	tbl := newTable(&out, "EVENT", "NAME")
	tbl.row("MODIFIED", "w")
	for _, c := range changes {
		tbl.detail(c)
	}
	if err := tbl.flush(); err != nil {
		t.Fatal(err)
	}
	want := "EVENT      NAME\n" +
		"MODIFIED   w\n" +
		`           + spec["cr...` + "\n" +
		`           + spec["k^[[31m...` + "\n" +
		`           + spec["tab\tkey"]: 2` + "\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("diff lines (-want +got):\n%s", diff)
	}
}

// TestHostileGroupsInCounts: count --by groups by values the tenants
// wrote (a label's, an annotation's, a custom resource's field).
func TestHostileGroupsInCounts(t *testing.T) {
	var out bytes.Buffer
	p := &printer{stdout: &out}
	counts := hubclient.Counts{Groups: map[string]uint64{"Running": 2, "x\x1b[31m\nTOTAL\t999": 1, "": 1}, Total: 4}
	if err := p.counts(counts, "spec.owner", true); err != nil {
		t.Fatal(err)
	}
	want := "SPEC.OWNER   COUNT\n" +
		"<none>       1\n" +
		"Running      2\n" +
		"x^[[31m...   1\n" +
		"TOTAL        4\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	// -o json is data: as the hub sent it, as kubectl prints it.
	out.Reset()
	p.format = "json"
	if err := p.counts(counts, "spec.owner", true); err != nil {
		t.Fatal(err)
	}
	if want := `"x\u001b[31m\nTOTAL\t999":1`; !strings.Contains(out.String(), want) {
		t.Errorf("-o json printed %s, want the group as sent: %s", out.String(), want)
	}
}

func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestHostileErrorMessages(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{status.Error(codes.InvalidArgument, "no such key: k\x1b[31m\rX"), "hubctl: InvalidArgument: no such key: k^[[31m\\rX\n"},
		{status.Error(codes.InvalidArgument, "ERROR: <input>:1:8: undeclared\n | object.x\n | .......^"),
			"hubctl: InvalidArgument: ERROR: <input>:1:8: undeclared\n | object.x\n | .......^\n"},
		{fmt.Errorf("watching roles: %w", status.Error(codes.NotFound, "e\x1bvil")), "hubctl: watching roles: rpc error: code = NotFound desc = e^[vil\n"},
		{errors.New("plain"), "hubctl: plain\n"},
	} {
		var stderr bytes.Buffer
		printError(&stderr, tt.err)
		if stderr.String() != tt.want {
			t.Errorf("printError(%q) printed %q, want %q", tt.err, stderr.String(), tt.want)
		}
	}
}
