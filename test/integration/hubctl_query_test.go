package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/informerhub/informerhub/informerhub"
)

// hubctlWatch is a `hubctl watch` running in the background, its output
// read line by line.
type hubctlWatch struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *bytes.Buffer
}

func startHubctlWatch(t *testing.T, bin string, args ...string) *hubctlWatch {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(t.TempDir(), "none")) // the namespace is "default" unless -n
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	w := &hubctlWatch{cmd: cmd, lines: make(chan string, 100), stderr: &bytes.Buffer{}}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.lines)
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			w.lines <- scanner.Text()
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt) //nolint:errcheck // it may have exited
		for range w.lines {
		}
		cmd.Wait() //nolint:errcheck // ended by the interrupt
	})
	return w
}

// read returns the next n lines.
func (w *hubctlWatch) read(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		select {
		case line, ok := <-w.lines:
			if !ok {
				t.Fatalf("hubctl exited after printing %q: %s", out, w.stderr.String())
			}
			out = append(out, line)
		case <-time.After(time.Minute):
			t.Fatalf("hubctl printed %q, then nothing", out)
		}
	}
	return out
}

// hubctlEvent is a line of `hubctl watch -o json`, as these tests compare it.
type hubctlEvent struct {
	Type             string
	Name             string
	Data             string // data.v
	Members          []string
	PreviousData     string
	InitialEventsEnd bool
}

func parseHubctlEvent(t *testing.T, line string) hubctlEvent {
	t.Helper()
	type object struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	}
	var e struct {
		Type             string                     `json:"type"`
		Object           map[string]json.RawMessage `json:"object"`
		PreviousObject   *object                    `json:"previousObject"`
		InitialEventsEnd bool                       `json:"initialEventsEnd"`
	}
	if err := json.Unmarshal([]byte(line), &e); err != nil {
		t.Fatalf("hubctl printed %q: %v", line, err)
	}
	out := hubctlEvent{Type: e.Type, InitialEventsEnd: e.InitialEventsEnd}
	if e.Object != nil {
		var o object
		raw, _ := json.Marshal(e.Object)
		if err := json.Unmarshal(raw, &o); err != nil {
			t.Fatal(err)
		}
		out.Name, out.Data = o.Metadata.Name, o.Data["v"]
		for k := range e.Object {
			out.Members = append(out.Members, k)
		}
		slices.Sort(out.Members)
	}
	if e.PreviousObject != nil {
		out.PreviousData = e.PreviousObject.Data["v"]
	}
	return out
}

// TestHubctlQueries runs hubctl's --filter, --fields, --show-previous and
// --field-selector against a hub, and the selectable fields of `hubctl
// resources`.
func TestHubctlQueries(t *testing.T) {
	bin := hubctl(t)
	ns := namespace(t)
	createConfigMap(t, ns, "alpha", map[string]string{"app": "web"}, "1")
	createConfigMap(t, ns, "beta", map[string]string{"app": "db"}, "1")
	sdkCreatePod(t, ns, "on-a", "node-a")
	sdkCreatePod(t, ns, "on-b", "node-b")
	h := startHub(t, informerhub.Config{})
	global := []string{"--insecure", "--hub", h.addr}
	run := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		return runHubctl(t, bin, append(global, args...)...)
	}

	t.Run("watch", func(t *testing.T) {
		// A table of the data's changes, with what changed; and, as JSON,
		// those of the objects whose data.v is not "3", with their
		// previous state.
		table := startHubctlWatch(t, bin, append(global, "watch", "configmaps", "-n", ns, "--fields", "data", "--show-previous")...)
		asJSON := startHubctlWatch(t, bin, append(global, "watch", "configmaps", "-n", ns, "--filter", `object.data.v != "3"`,
			"--fields", "data", "--fields", "metadata.labels", "--show-previous", "-o", "json")...)
		table.read(t, 3) // the header and the two objects: the watch runs
		var initial []hubctlEvent
		for _, line := range asJSON.read(t, 3) {
			initial = append(initial, parseHubctlEvent(t, line))
		}
		wantInitial := []hubctlEvent{
			{Type: "ADDED", Name: "alpha", Data: "1", Members: []string{"apiVersion", "data", "kind", "metadata"}},
			{Type: "ADDED", Name: "beta", Data: "1", Members: []string{"apiVersion", "data", "kind", "metadata"}},
			{Type: "BOOKMARK", InitialEventsEnd: true},
		}
		if diff := cmp.Diff(wantInitial, initial); diff != "" {
			t.Fatalf("initial events of the JSON watch (-want +got):\n%s", diff)
		}

		updateConfigMap(t, ns, "alpha", map[string]string{"app": "web"}, "2")
		updateConfigMap(t, ns, "beta", map[string]string{"app": "db", "tier": "back"}, "1") // labels only: not in the table
		updateConfigMap(t, ns, "beta", map[string]string{"app": "db", "tier": "back"}, "3") // leaves the filter
		createConfigMap(t, ns, "gamma", nil, "1")

		wantTable := "MODIFIED alpha <rv> <age>\n" +
			`~ data.v: "1" -> "2"` + "\n" +
			"MODIFIED beta <rv> <age>\n" +
			`~ data.v: "1" -> "3"` + "\n" +
			"ADDED gamma <rv> <age>\n"
		if diff := cmp.Diff(wantTable, normalize(strings.Join(table.read(t, 5), "\n"), ns)); diff != "" {
			t.Errorf("the table's changes (-want +got):\n%s", diff)
		}
		var changes []hubctlEvent
		for len(changes) < 4 {
			if e := parseHubctlEvent(t, asJSON.read(t, 1)[0]); e.Type != "BOOKMARK" { // a quiet stream's
				changes = append(changes, e)
			}
		}
		wantChanges := []hubctlEvent{
			{Type: "MODIFIED", Name: "alpha", Data: "2", Members: []string{"apiVersion", "data", "kind", "metadata"}, PreviousData: "1"},
			{Type: "MODIFIED", Name: "beta", Data: "1", Members: []string{"apiVersion", "data", "kind", "metadata"}, PreviousData: "1"},
			{Type: "DELETED", Name: "beta", Data: "1", Members: []string{"apiVersion", "data", "kind", "metadata"}},
			{Type: "ADDED", Name: "gamma", Data: "1", Members: []string{"apiVersion", "data", "kind", "metadata"}},
		}
		if diff := cmp.Diff(wantChanges, changes); diff != "" {
			t.Errorf("the JSON watch's changes (-want +got):\n%s", diff)
		}
	})

	t.Run("snapshot", func(t *testing.T) {
		stdout, stderr, code := run("snapshot", "configmaps", "-n", ns, "--filter", `object.metadata.labels.app == "web"`, "--fields", "data", "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var snap struct {
			Objects      []map[string]json.RawMessage `json:"items"`
			FilterErrors []string                     `json:"filterErrors"`
		}
		if err := json.Unmarshal([]byte(stdout), &snap); err != nil {
			t.Fatalf("-o json printed %s: %v", stdout, err)
		}
		// gamma has no labels: the filter cannot decide on it, so it is
		// listed, marked.
		if len(snap.Objects) != 2 || canonicalJSON(t, snap.Objects[0]["data"]) != `{"v":"2"}` || len(snap.Objects[0]) != 4 ||
			len(snap.FilterErrors) != 2 || snap.FilterErrors[0] != "" || !strings.Contains(snap.FilterErrors[1], "no such key") {
			t.Fatalf("snapshot %s, want alpha projected to its data, and gamma marked with its filter error", stdout)
		}

		// managedFields, left out of -o json by default, are kept when a
		// --field names them.
		stdout, stderr, code = run("snapshot", "configmaps", "-n", ns, "--field", "metadata.managedFields", "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var managed struct {
			Items []struct {
				Metadata struct {
					ManagedFields []json.RawMessage `json:"managedFields"`
				} `json:"metadata"`
			} `json:"items"`
		}
		if err := json.Unmarshal([]byte(stdout), &managed); err != nil || len(managed.Items) == 0 || len(managed.Items[0].Metadata.ManagedFields) == 0 {
			t.Errorf("snapshot --field metadata.managedFields -o json printed %s (%v), want the items' managedFields", stdout, err)
		}

		stdout, stderr, code = run("snapshot", "pods", "-n", ns, "--field-selector", "spec.nodeName=node-a", "--fields", "spec.nodeName")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if want := "NAME RESOURCEVERSION AGE\non-a <rv> <age>\n"; normalize(stdout, ns) != want {
			t.Errorf("snapshot of node-a's pods:\n%s\nwant\n%s", normalize(stdout, ns), want)
		}
	})

	t.Run("resources", func(t *testing.T) {
		stdout, stderr, code := run("resources", "-o", "json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var resources []struct {
			Resource         string
			Group            string
			SelectableFields []string
		}
		if err := json.Unmarshal([]byte(stdout), &resources); err != nil {
			t.Fatal(err)
		}
		fields := map[string][]string{}
		for _, r := range resources {
			if r.Group == "" {
				fields[r.Resource] = r.SelectableFields
			}
		}
		if !slices.Contains(fields["pods"], "spec.nodeName") || !slices.Contains(fields["pods"], "status.phase") ||
			!slices.Equal(fields["configmaps"], []string{"metadata.name", "metadata.namespace"}) {
			t.Fatalf("selectable fields of pods %q, of configmaps %q", fields["pods"], fields["configmaps"])
		}

		stdout, _, code = run("resources", "-n", ns, "-o", "wide")
		wide := regexp.MustCompile(`(?m)^\s+v1\s+pods\s+Pod\s+(\S+)$`).FindStringSubmatch(stdout)
		if code != 0 || wide == nil || wide[1] != strings.Join(fields["pods"], ",") {
			t.Fatalf("exit %d, resources -o wide:\n%s", code, stdout)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tt := range []struct {
			args   []string
			code   int
			stderr string
		}{
			{[]string{"watch", "configmaps", "--filter", "object.data.v =="}, 1, "InvalidArgument: selector.filter"},
			{[]string{"snapshot", "configmaps", "--field-selector", "spec.nodeName=node-a"}, 1, "InvalidArgument: selector.field_selector"},
			{[]string{"watch", "configmaps", "--fields", "status.phase,,data"}, 2, "empty path"},
		} {
			_, stderr, code := run(tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("hubctl %v: exit %d, stderr %q; want exit %d and %q", tt.args, code, stderr, tt.code, tt.stderr)
			}
		}
	})
}
