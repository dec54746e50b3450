package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/liggitt/tabwriter"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

// printer prints what the --output flag asks for: a table (format ""), or
// JSON documents, one a line, or YAML documents, separated by "---" as
// kubectl separates them (none before the first).
type printer struct {
	stdout, stderr io.Writer
	now            func() time.Time
	format         string
	// showManagedFields keeps metadata.managedFields in JSON and YAML, as
	// kubectl's --show-managed-fields does, and in a watch's changes; by
	// default they are left out. A --field that names them asks for them
	// too.
	showManagedFields bool
	// withNamespace adds the NAMESPACE column to tables of objects, as
	// kubectl get adds it: for -A, and a namespaced type (for several
	// types, one at least).
	withNamespace bool
	documents     int // printed so far
}

// document prints v as one JSON or YAML document.
func (p *printer) document(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	p.documents++
	if p.format == "yaml" {
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
		if p.documents > 1 {
			b = append([]byte("---\n"), b...)
		}
		_, err = p.stdout.Write(b)
		return err
	}
	_, err = fmt.Fprintf(p.stdout, "%s\n", b)
	return err
}

// object is an object as JSON and YAML print it: without its
// managedFields, unless asked for. They are the API server's bookkeeping,
// often longer than the rest of the object.
func (p *printer) object(object []byte) (json.RawMessage, error) {
	if object == nil || p.showManagedFields || !bytes.Contains(object, []byte(`"managedFields"`)) {
		return object, nil
	}
	dec := json.NewDecoder(bytes.NewReader(object))
	dec.UseNumber() // numbers print as the API server wrote them
	var u map[string]any
	if err := dec.Decode(&u); err != nil {
		return nil, fmt.Errorf("decoding an object: %w", err)
	}
	metadata, ok := u["metadata"].(map[string]any)
	if !ok {
		return object, nil
	}
	if _, ok := metadata["managedFields"]; !ok {
		return object, nil // the word was elsewhere, in a label say
	}
	delete(metadata, "managedFields")
	// json.Marshal writes <, > and & as \u003c, \u003e and \u0026; so
	// does document's, which compacts the objects it holds anyway, and so
	// does kubectl's -o json. YAML shows them as they are.
	return json.Marshal(u)
}

// noResources says, on stderr, that a listing found nothing, in kubectl's
// words: namespace is the one listed, "" for cluster-scoped types or every
// namespace.
func (p *printer) noResources(namespace string) {
	if namespace != "" {
		fmt.Fprintf(p.stderr, "No resources found in %s namespace.\n", namespace)
	} else {
		fmt.Fprintln(p.stderr, "No resources found")
	}
}

// objectHeader is the header of an object's columns, as kubectl get's:
// NAMESPACE only for every namespace (-A), and not for cluster-scoped
// types.
func (p *printer) objectHeader() []string {
	if p.withNamespace {
		return []string{"NAMESPACE", "NAME", "RESOURCEVERSION", "AGE"}
	}
	return []string{"NAME", "RESOURCEVERSION", "AGE"}
}

// objectRow is u in the columns of objectHeader.
func (p *printer) objectRow(u *unstructured.Unstructured) []string {
	if p.withNamespace {
		return []string{u.GetNamespace(), u.GetName(), u.GetResourceVersion(), p.age(u)}
	}
	return []string{u.GetName(), u.GetResourceVersion(), p.age(u)}
}

// objectName is how messages name an object: namespace/name, or name
// for a cluster-scoped one, escaped as a cell.
func objectName(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return escapeCell(u.GetName())
	}
	return escapeCell(u.GetNamespace() + "/" + u.GetName())
}

func (p *printer) age(u *unstructured.Unstructured) string {
	created := u.GetCreationTimestamp()
	if created.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(p.now().Sub(created.Time))
}

// counts prints the counts of a Count, grouped by groupBy ("" for the
// total only); first: the first counts (a table after others is set apart
// by an empty line).
func (p *printer) counts(counts hubclient.Counts, groupBy string, first bool) error {
	if p.format != "" {
		return p.document(struct {
			Groups          map[string]uint64 `json:"groups,omitempty"`
			Total           uint64            `json:"total"`
			ResourceVersion string            `json:"resourceVersion"`
		}{counts.Groups, counts.Total, counts.ResourceVersion})
	}
	if !first {
		fmt.Fprintln(p.stdout)
	}
	if groupBy == "" {
		table := newTable(p.stdout, "COUNT")
		table.row(strconv.FormatUint(counts.Total, 10))
		return table.flush()
	}
	table := newTable(p.stdout, strings.ToUpper(groupBy), "COUNT")
	for _, group := range slices.Sorted(maps.Keys(counts.Groups)) {
		shown := group
		if shown == "" {
			shown = "<none>"
		}
		table.row(shown, strconv.FormatUint(counts.Groups[group], 10))
	}
	table.row("TOTAL", strconv.FormatUint(counts.Total, 10))
	return table.flush()
}

// widestEvent is the widest value of a watch table's EVENT column: the
// longest type with every mark printEvent may add (* re-synced, ~ found
// by a relist, ? the filter could not decide). The column is this wide
// from the first row on, so that the first MODIFIED after the initial
// ADDEDs shifts no column.
const widestEvent = string(hubclient.Modified) + "*~?"

// eventPrinter prints the events of a watch, or of a WatchMany (many: with
// each event's resource type).
//
// Its table is aligned as kubectl get -w aligns its own: the initial
// objects (batching, until their end) together with the header, each
// column as wide as its widest value; each later event at once, in the
// columns as wide as they were, widened if its value is wider.
type eventPrinter struct {
	*printer
	many bool
	// resources are the types a WatchMany watches: the RESOURCE column is
	// as wide as the widest from the first row on.
	resources []string
	// namespace is the one watched, for the message of an empty initial
	// list ("" for every namespace, or cluster-scoped types).
	namespace   string
	batching    bool   // the initial objects are being listed
	table       *table // made at the first object, so that errors come before a header
	rows        int
	relistNoted bool // the ~ of relisted events has been explained
}

// print prints e, of resource, whose stream resumes after it from token;
// initialEnd: e ends the initial objects.
func (p *eventPrinter) print(e hubclient.Event, resource, token string, initialEnd bool) error {
	if err := p.printEvent(e, resource, token); err != nil {
		return err
	}
	if p.format == "" && (!p.batching || initialEnd) {
		if p.batching && p.rows == 0 {
			p.noResources(p.namespace)
		}
		p.batching = false
		if p.table != nil {
			return p.table.flush()
		}
	}
	return nil
}

func (p *eventPrinter) printEvent(e hubclient.Event, resource, token string) error {
	if p.format != "" {
		object, err := p.object(e.Object)
		if err != nil {
			return err
		}
		previous, err := p.object(e.Previous)
		if err != nil {
			return err
		}
		return p.document(eventJSON{Type: e.Type, Resource: resource, Object: object, PreviousObject: previous,
			ResourceVersion: e.ResourceVersion, ResumeToken: token, InitialEventsEnd: e.InitialEventsEnd, FromRelist: e.FromRelist, FilterError: e.FilterError, Resync: e.Resync})
	}
	if e.Type == hubclient.Bookmark {
		switch {
		case e.ResyncReplaces:
			fmt.Fprintln(p.stderr, "(the hub could not resume this watch; it listed again: the objects marked * are all that exist now)")
		case e.Resync:
			fmt.Fprintln(p.stderr, "(the hub could not resume this watch; it re-synced: the changes marked * are the differences)")
		}
		return nil
	}
	u, err := e.Unstructured()
	if err != nil {
		return err
	}
	// The marks after the type: as widestEvent has them.
	eventType := string(e.Type)
	if e.Resync {
		eventType += "*"
	}
	if e.FromRelist {
		if !p.relistNoted {
			fmt.Fprintln(p.stderr, "(the events marked ~ were found by a relist of the hub: what happened in between is unknown)")
			p.relistNoted = true
		}
		eventType += "~"
	}
	if e.FilterError != "" {
		// Rare, and each may say something else: on its line.
		fmt.Fprintf(p.stderr, "(the filter could not decide on %s, sent as if it matched: %s)\n", objectName(u), escapeCell(e.FilterError))
		eventType += "?"
	}
	switch {
	case p.table == nil && p.many:
		p.table = newTable(p.stdout, append([]string{"EVENT", "RESOURCE"}, p.objectHeader()...)...)
		p.table.widen(0, widestEvent)
		p.table.widen(1, p.resources...)
	case p.table == nil:
		p.table = newTable(p.stdout, append([]string{"EVENT"}, p.objectHeader()...)...)
		p.table.widen(0, widestEvent)
	}
	if p.many {
		p.table.row(append([]string{eventType, resource}, p.objectRow(u)...)...)
	} else {
		p.table.row(append([]string{eventType}, p.objectRow(u)...)...)
	}
	p.rows++
	if e.Type == hubclient.Modified && e.Previous != nil {
		changes, err := diffObjects(e.Previous, e.Object, p.showManagedFields)
		if err != nil {
			return err
		}
		for _, change := range changes {
			p.table.detail(change)
		}
	}
	return nil
}

// eventJSON is a watch event as `hubctl watch -o json` prints it.
type eventJSON struct {
	Type hubclient.EventType `json:"type"`
	// Resource is the event's resource type, when several are watched.
	Resource         string          `json:"resource,omitempty"`
	Object           json.RawMessage `json:"object,omitempty"`
	PreviousObject   json.RawMessage `json:"previousObject,omitempty"`
	ResourceVersion  string          `json:"resourceVersion"`
	ResumeToken      string          `json:"resumeToken"`
	InitialEventsEnd bool            `json:"initialEventsEnd,omitempty"`
	FromRelist       bool            `json:"fromRelist,omitempty"`
	FilterError      string          `json:"filterError,omitempty"`
	Resync           bool            `json:"resync,omitempty"`
}

// listJSON is a snapshot as `hubctl snapshot -o json` prints it: a
// Kubernetes List, as `kubectl get -o json` prints one, with the token to
// watch the changes after it.
type listJSON struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   listMeta          `json:"metadata"`
	Items      []json.RawMessage `json:"items"`
	// ResumeToken is where `hubctl watch --resume-token` continues: with
	// exactly the changes after these items.
	ResumeToken string `json:"resumeToken"`
	// FilterErrors are, for each item, why the filter could not decide on
	// it ("" where it could); absent when it always could.
	FilterErrors []string `json:"filterErrors,omitempty"`
}

type listMeta struct {
	ResourceVersion string `json:"resourceVersion"`
}

// table prints rows in columns as wide as their widest value, with
// kubectl's tabwriter and settings (k8s.io/cli-runtime/pkg/printers): the
// header is written with the first row (an empty table prints nothing),
// and rows are aligned together when flushed. The widths of a flush are
// remembered, so that the rows of a later flush line up with those before
// (a watch flushes at every event), a column growing only for a wider
// value; text/tabwriter, which forgets them, cannot do that.
//
// A column whose values are known beforehand can be made as wide as the
// widest of them from the first row on (widen), as kubectl pads its
// header: then a later row never shifts the columns after it.
type table struct {
	w       *tabwriter.Writer
	header  []string
	widths  []int // of each column, at least, from the first row on
	started bool  // the header is written
}

func newTable(out io.Writer, header ...string) *table {
	return &table{w: tabwriter.NewWriter(out, 6, 4, 3, ' ', tabwriter.RememberWidths), header: header}
}

// widen makes column i at least as wide as each of values, printed.
func (t *table) widen(i int, values ...string) {
	if len(t.widths) <= i {
		t.widths = append(t.widths, make([]int, i+1-len(t.widths))...)
	}
	for _, v := range values {
		t.widths[i] = max(t.widths[i], utf8.RuneCountInString(escapeCell(v)))
	}
}

func (t *table) row(cells ...string) {
	if !t.started {
		// The header sets the widths: padded, but for the last column
		// (padding it would add trailing blanks and align nothing).
		header := slices.Clone(t.header)
		for i, w := range t.widths {
			if i < len(header)-1 {
				header[i] += strings.Repeat(" ", max(0, w-utf8.RuneCountInString(header[i])))
			}
		}
		t.write(header)
		t.started = true
	}
	t.write(cells)
}

// detail writes a line under the last row, aligned with its second
// column, escaped as a cell.
func (t *table) detail(line string) {
	fmt.Fprintf(t.w, "\t%s\n", escapeCell(line))
}

func (t *table) flush() error { return t.w.Flush() }

// write writes a row, each cell escaped (escapeCell): whatever a value
// holds, it stays in its cell and its row on one line.
func (t *table) write(cells []string) {
	for i, cell := range cells {
		if i > 0 {
			io.WriteString(t.w, "\t") //nolint:errcheck // Flush reports write errors
		}
		io.WriteString(t.w, escapeCell(cell)) //nolint:errcheck
	}
	io.WriteString(t.w, "\n") //nolint:errcheck
}
