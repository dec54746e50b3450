package conformance

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// A row is a promise of a request: what a field asks for, or what every
// stream is promised.
type row string

// The rows, in the order of docs/conformance.md.
const (
	rowResource      row = "resource type"
	rowNamespace     row = "namespace"
	rowLabels        row = "label_selector"
	rowFields        row = "field_selector: built-in"
	rowCRDFields     row = "field_selector: selectableFields"
	rowFilter        row = "filter, filter_error"
	rowShard         row = "shard_selector"
	rowProjection    row = "fields"
	rowPrevious      row = "include_previous"
	rowFormat        row = "object_format"
	rowInitial       row = "send_initial_events"
	rowToken         row = "resume_token"
	rowBookmarks     row = "bookmarks"
	rowRBAC          row = "RBAC"
	rowManyWatches   row = "WatchMany watches"
	rowManyToken     row = "WatchMany resume_token"
	rowGroupBy       row = "Count group_by"
	rowEndingsStatus row = "endings"
)

// rows say what each row promises, as docs/conformance.md explains it.
var rows = []struct {
	row     row
	promise string
}{
	{rowResource, "the events are of the resource type asked for (group, version, resource)"},
	{rowNamespace, "one namespace's objects, and all of them"},
	{rowLabels, "what the label selector selects: an object whose labels start matching is ADDED, one whose labels stop matching is DELETED in its last matching state"},
	{rowFields, "what a built-in type's field selector selects (core events' reason), entering and leaving as labels do"},
	{rowCRDFields, "what a custom resource's selectable field selects (spec.color), entering and leaving"},
	{rowFilter, "what the CEL filter selects, entering and leaving; an object it cannot decide on is sent, marked with filter_error"},
	{rowShard, "exactly the objects whose uid hashes into the shard's ranges (FNV-1a 64, start included, end excluded), as the API server's sharded LIST selects them"},
	{rowProjection, "only the paths asked for (and the identity), and no MODIFIED that leaves them the same"},
	{rowPrevious, "every MODIFIED carries the state before it, projected like the object"},
	{rowFormat, "objects as google.protobuf.Struct (OBJECT_FORMAT_STRUCT), the same objects"},
	{rowInitial, "an ADDED per object of one point in time, then a BOOKMARK with initial_events_end, then every change after that point"},
	{rowToken, "a stream cut at any response and resumed with its token continues exactly: nothing lost, nothing repeated, in order"},
	{rowBookmarks, "a quiet stream gets bookmarks; a bookmark never passes a change it did not send, and its token resumes exactly"},
	{rowRBAC, "a caller gets what its own RBAC lets it list and watch, and nothing once it may not (PERMISSION_DENIED, with the token to resume from)"},
	{rowManyWatches, "each watch of a WatchMany gets what a Watch of it would get"},
	{rowManyToken, "a WatchMany resumed with a composite token continues every watch exactly"},
	{rowGroupBy, "the counts of a Count are those of the state at their resourceVersion, per group"},
	{rowEndingsStatus, "a stream the hub ends (access revoked, client too slow) ends with its status and resume_token, not a broken transport"},
}

// A column is a path an event takes to a client.
type column string

const (
	colLive           column = "live"
	colInitial        column = "initial events"
	colSnapshot       column = "Snapshot"
	colCatchUpMemory  column = "catch-up: memory"
	colCatchUpDisk    column = "catch-up: disk"
	colReplayResume   column = "replay: resume"
	colReplayReplica  column = "replay: other replica"
	colReplayMid      column = "replay: mid-stream"
	colReplayCut      column = "replay: retention cut"
	colRelist         column = "relist"
	colWatchMany      column = "WatchMany"
	colCount          column = "Count"
	colDigest         column = "Digest"
	colConnectJSON    column = "Connect JSON"
	colConnectProto   column = "Connect binary"
	colGRPCWebProto   column = "gRPC-Web"
	colGRPCWebJSONH2C column = "gRPC-Web JSON"
)

// columns say how each column's path is forced, and how a test knows it
// was taken.
var columns = []struct {
	column column
	path   string
}{
	{colLive, "a Watch from a Snapshot's token, at the head of the history: it joins the live subscribers at once (TestLive)"},
	{colInitial, "a Watch with send_initial_events, cut inside its initial events and resumed with the token of one (TestInitialEvents)"},
	{colSnapshot, "Snapshot in pages of three objects, then a Watch from its token (TestSnapshot)"},
	{colCatchUpMemory, "live subscribers whose readers stop reading while changes come: their queues fill and they read on from the history in memory (TestCatchUpFromMemory; the feeds' FellBehind counts it)"},
	{colCatchUpDisk, "tokens older than the history in memory, which the disk history holds, on a disk slow enough that a catch-up outlasts the bookmark interval (TestCatchUpFromDisk; no replay counted, and the memory's window begins after the tokens)"},
	{colReplayResume, "tokens older than a history of 32 changes (TestReplayAtResume; the feeds' Replays count one per stream)"},
	{colReplayReplica, "tokens of one hub resumed on another, started after them (TestReplayOnAnotherReplica; the second hub's Replays count one per stream)"},
	{colReplayMid, "streams catching up from tokens whose readers stop while more changes than the history holds come (TestReplayMidStream; Replays count one per stream)"},
	{colReplayCut, "streams catching up from the disk whose readers stop while retention deletes what they read (TestReplayAfterARetentionCut; Replays count one per stream)"},
	{colRelist, "a hub on an API server without a watch cache, which is stopped while objects change and etcd is compacted: its watch gets 410 Gone and it relists (TestRelist; the feeds' Relists count it, the events are marked from_relist)"},
	{colWatchMany, "every probe as one watch of one WatchMany with initial events, cut and resumed with its composite token once the history has moved past it (TestWatchMany; its replays counted)"},
	{colCount, "a Count of each selector, its totals compared with the reference's state at their resourceVersion (TestCount)"},
	{colDigest, "a Digest of each selector at its Snapshot's token, at every token its stream received through the churn, and now, compared with the digest of the reference's state at that resourceVersion (TestDigest)"},
	{colConnectJSON, "the live, initial-events and Snapshot paths over the Connect protocol, JSON, HTTP/1.1 (TestProtocols)"},
	{colConnectProto, "the same over the Connect protocol, binary, h2c (TestProtocols)"},
	{colGRPCWebProto, "the same over gRPC-Web, binary, HTTP/1.1 (TestProtocols)"},
	{colGRPCWebJSONH2C, "the same over gRPC-Web, JSON, h2c (TestProtocols)"},
}

// protocolColumns are the columns of the protocols other than gRPC (every
// other column's), by testhub.Protocols' names.
var protocolColumns = map[string]column{
	"connect+json/http1.1":  colConnectJSON,
	"connect+proto/h2c":     colConnectProto,
	"grpcweb+proto/http1.1": colGRPCWebProto,
	"grpcweb+json/h2c":      colGRPCWebJSONH2C,
}

// notApplicable says why a cell holds no test: the path cannot carry the
// promise, or another cell's test proves it. Every other cell of a row with
// a probe on that column's path is a test.
var notApplicable = map[row]map[column]string{
	rowPrevious: {
		colSnapshot: "a Snapshot has objects, no changes",
		colCount:    "a Count has no objects",
		colDigest:   "a Digest has no objects",
	},
	rowProjection: {colCount: "a Count has no objects", colDigest: "a Digest has no projection: a stream with fields matches it only when they keep metadata.resourceVersion (the proto says so)"},
	rowFormat:     {colCount: "a Count has no objects", colDigest: "a Digest has no objects"},
	rowInitial: {
		colSnapshot:      "a Snapshot is its own initial state, which its own cells check",
		colCatchUpMemory: "initial events are read from a clone of the state, which the history does not hold: the initial-events cell",
		colCatchUpDisk:   "initial events as of a point only the disk holds are OUT_OF_RANGE: the hub would roll the state back through every change since",
		colReplayResume:  "initial events as of a token older than the history are OUT_OF_RANGE (documented)",
		colReplayReplica: "a token of another replica's initial events is OUT_OF_RANGE (documented: a position of one feed instance)",
		colReplayMid:     "a replay begins after the initial events",
		colReplayCut:     "a replay begins after the initial events",
		colRelist:        "a relist's differences follow the initial events",
		colCount:         "a Count's first counts are its initial events",
		colDigest:        "the Digest at an initial event's token is of the objects listed up to it, which a client holds (the core's unit test); every other token's, here",
	},
	rowToken: {colCount: "counts carry no token"},
	rowBookmarks: {
		colSnapshot: "a Snapshot has no bookmarks",
		colCount:    "a Count has no bookmarks",
	},
	rowRBAC: {
		colCatchUpMemory: "access is checked as a stream opens and rechecked while it runs, whatever path feeds it: the live, replay and protocol cells check both",
		colCatchUpDisk:   "access is checked as a stream opens and rechecked while it runs, whatever path feeds it: the live, replay and protocol cells check both",
		colReplayReplica: "access is checked as a stream opens and rechecked while it runs, whatever path feeds it: the live, replay and protocol cells check both",
		colReplayMid:     "access is checked as a stream opens and rechecked while it runs, whatever path feeds it: the live, replay and protocol cells check both",
		colReplayCut:     "access is checked as a stream opens and rechecked while it runs, whatever path feeds it: the live, replay and protocol cells check both",
		colRelist:        "access is checked as a stream opens and rechecked while it runs, whatever path feeds it: the live, replay and protocol cells check both",
	},
	rowEndingsStatus: {
		colInitial:       "how an ending reaches the client depends on its protocol's send, not on the path that fed the stream: the gRPC (live) and HTTP cells",
		colSnapshot:      "how an ending reaches the client depends on its protocol's send, not on the path that fed the stream: the gRPC (live) and HTTP cells",
		colCatchUpMemory: "how an ending reaches the client depends on its protocol's send, not on the path that fed the stream: the gRPC (live) and HTTP cells",
		colCatchUpDisk:   "how an ending reaches the client depends on its protocol's send, not on the path that fed the stream: the gRPC (live) and HTTP cells",
		colReplayResume:  "how an ending reaches the client depends on its protocol's send, not on the path that fed the stream: the gRPC (live) and HTTP cells",
		colReplayReplica: "how an ending reaches the client depends on its protocol's send, not on the path that fed the stream: the gRPC (live) and HTTP cells",
		colReplayMid:     "how an ending reaches the client depends on its protocol's send, not on the path that fed the stream: the gRPC (live) and HTTP cells",
		colReplayCut:     "how an ending reaches the client depends on its protocol's send, not on the path that fed the stream: the gRPC (live) and HTTP cells",
		colRelist:        "how an ending reaches the client depends on its protocol's send, not on the path that fed the stream: the gRPC (live) and HTTP cells",
		colWatchMany:     "a WatchMany ends as a Watch does, through the same stream (TestRBAC's WatchMany ends with PERMISSION_DENIED and its composite token)",
		colCount:         "counts carry no token",
	},
}

// probesOf are the rows with a probe on every path but where
// notApplicable says otherwise; the other rows' cells are theirs alone.
var cellsOf = map[row][]column{
	rowInitial:       {colLive, colInitial, colWatchMany, colConnectJSON, colConnectProto, colGRPCWebProto, colGRPCWebJSONH2C},
	rowRBAC:          {colLive, colInitial, colSnapshot, colReplayResume, colWatchMany, colCount, colDigest, colConnectJSON, colConnectProto, colGRPCWebProto, colGRPCWebJSONH2C},
	rowManyWatches:   {colWatchMany},
	rowManyToken:     {colWatchMany},
	rowGroupBy:       {colCount},
	rowEndingsStatus: {colLive, colConnectJSON, colConnectProto, colGRPCWebProto, colGRPCWebJSONH2C},
}

// cellFor says what a cell holds: a test (test set), or why not (na set),
// or nothing (neither: the row has no cell there).
func cellFor(r row, c column) (test bool, na string) {
	if reason := notApplicable[r][c]; reason != "" {
		return false, reason
	}
	if cols, ok := cellsOf[r]; ok {
		return slices.Contains(cols, c), ""
	}
	if r == rowShard || r == rowFilter || r == rowNamespace || r == rowLabels || r == rowFields || r == rowCRDFields || r == rowResource {
		return true, "" // selectors hold on every path, Count included
	}
	if c == colCount {
		return false, "a Count has no objects"
	}
	return true, ""
}

// passed records the cells whose tests passed in this run.
var passed = struct {
	sync.Mutex
	cells map[row]map[column]bool
}{cells: map[row]map[column]bool{}}

// pass records that the cell's test passed; it fails the test if the
// matrix says the cell has none.
func pass(t *testing.T, r row, c column) {
	t.Helper()
	if test, _ := cellFor(r, c); !test {
		t.Errorf("the matrix has no test in the cell %q × %q", r, c)
		return
	}
	passed.Lock()
	defer passed.Unlock()
	if passed.cells[r] == nil {
		passed.cells[r] = map[column]bool{}
	}
	passed.cells[r][c] = true
}

// passIfOK records the cell as passed when the test (a probe's subtest)
// has not failed by its end.
func passIfOK(t *testing.T, r row, c column) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			pass(t, r, c)
		}
	})
}

// checkEveryCellRan fails a run of the whole suite in which a cell that
// should have a test did not pass one. A run of some tests (-run) checks
// nothing.
func checkEveryCellRan() int {
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		return 0
	}
	if testing.Short() {
		return 0
	}
	passed.Lock()
	defer passed.Unlock()
	var missing []string
	for _, r := range rows {
		for _, c := range columns {
			if test, _ := cellFor(r.row, c.column); test && !passed.cells[r.row][c.column] {
				missing = append(missing, fmt.Sprintf("%s × %s", r.row, c.column))
			}
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "cells of the matrix whose test did not pass: %s\n", strings.Join(missing, "; "))
		return 1
	}
	return 0
}

// rowOfField maps every field of the requests to the row that proves it.
var rowOfField = map[protoreflect.FullName]row{
	"informerhub.v1.ResourceSelector.group":           rowResource,
	"informerhub.v1.ResourceSelector.version":         rowResource,
	"informerhub.v1.ResourceSelector.resource":        rowResource,
	"informerhub.v1.ResourceSelector.namespace":       rowNamespace,
	"informerhub.v1.ResourceSelector.label_selector":  rowLabels,
	"informerhub.v1.ResourceSelector.field_selector":  rowFields,
	"informerhub.v1.ResourceSelector.filter":          rowFilter,
	"informerhub.v1.ResourceSelector.shard_selector":  rowShard,
	"informerhub.v1.WatchRequest.selector":            rowResource,
	"informerhub.v1.WatchRequest.resume_token":        rowToken,
	"informerhub.v1.WatchRequest.send_initial_events": rowInitial,
	"informerhub.v1.WatchRequest.fields":              rowProjection,
	"informerhub.v1.WatchRequest.include_previous":    rowPrevious,
	"informerhub.v1.WatchRequest.object_format":       rowFormat,
	"informerhub.v1.SnapshotRequest.selector":         rowResource,
	"informerhub.v1.SnapshotRequest.fields":           rowProjection,
	"informerhub.v1.SnapshotRequest.object_format":    rowFormat,
	"informerhub.v1.WatchManyRequest.watches":         rowManyWatches,
	"informerhub.v1.WatchManyRequest.resume_token":    rowManyToken,
	"informerhub.v1.CountRequest.selector":            rowResource,
	"informerhub.v1.CountRequest.group_by":            rowGroupBy,
	"informerhub.v1.DigestRequest.selector":           rowResource,
	"informerhub.v1.DigestRequest.resume_token":       rowToken,
}

// TestEveryRequestFieldHasARow: a field added to a request cannot land
// without its row in the matrix, which then needs its cells.
func TestEveryRequestFieldHasARow(t *testing.T) {
	for _, msg := range []protoreflect.MessageDescriptor{
		(&informerhubv1.ResourceSelector{}).ProtoReflect().Descriptor(),
		(&informerhubv1.WatchRequest{}).ProtoReflect().Descriptor(),
		(&informerhubv1.WatchManyRequest{}).ProtoReflect().Descriptor(),
		(&informerhubv1.SnapshotRequest{}).ProtoReflect().Descriptor(),
		(&informerhubv1.CountRequest{}).ProtoReflect().Descriptor(),
		(&informerhubv1.DigestRequest{}).ProtoReflect().Descriptor(),
	} {
		fields := msg.Fields()
		for i := range fields.Len() {
			name := fields.Get(i).FullName()
			r, ok := rowOfField[name]
			if !ok {
				t.Errorf("%s has no row in the conformance matrix: add one (rows, rowOfField), with its probes and cells", name)
				continue
			}
			if !slices.ContainsFunc(rows, func(x struct {
				row     row
				promise string
			}) bool {
				return x.row == r
			}) {
				t.Errorf("%s maps to %q, which is not a row", name, r)
			}
		}
	}
}

// TestTheMatrixIsDocumented: docs/conformance.md is the matrix as this
// package declares it; -update writes it (make conformance-doc).
func TestTheMatrixIsDocumented(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "conformance.md")
	want := matrixDoc()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is not the matrix of test/conformance: run make conformance-doc, and commit it", path)
	}
}

// matrixDoc is docs/conformance.md.
func matrixDoc() string {
	var b strings.Builder
	b.WriteString(`# Conformance: every promise on every path

<!-- Generated by test/conformance (make conformance-doc): do not edit. -->

Each row is a promise a request makes (a field of ResourceSelector,
WatchRequest, WatchManyRequest, SnapshotRequest or CountRequest), or one
the service makes every stream; each column a path an event takes to a
client. A cell marked ✓ is a test of package test/conformance against a real
kube-apiserver and etcd, run by ` + "`make test`" + `, whose oracle is the API
server: its own watch of everything and its LISTs at exact versions (with
its field selectors and, with ShardedListAndWatch on, its shard selectors);
what it cannot evaluate (a CEL filter, a projection, previous states) the
test computes apart from the hub. Every run of the whole suite checks that
each ✓ cell passed. A numbered cell is not applicable, for the reason under
the table; a blank one, a promise of other paths only. ` + "`TestEveryRequestFieldHasARow`" + ` fails when a field of a request
has no row.

`)
	b.WriteString("| promise |")
	for _, c := range columns {
		fmt.Fprintf(&b, " %s |", c.column)
	}
	b.WriteString("\n|---|")
	for range columns {
		b.WriteString(":-:|")
	}
	b.WriteString("\n")
	var reasons []string
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s |", r.row)
		for _, c := range columns {
			switch test, na := cellFor(r.row, c.column); {
			case test:
				b.WriteString(" ✓ |")
			case na != "":
				i := slices.Index(reasons, na)
				if i < 0 {
					reasons = append(reasons, na)
					i = len(reasons) - 1
				}
				fmt.Fprintf(&b, " %d |", i+1)
			default:
				b.WriteString(" |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("\n## The paths\n\n")
	for _, c := range columns {
		fmt.Fprintf(&b, "- **%s**: %s.\n", c.column, c.path)
	}
	b.WriteString("\n## The promises\n\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "- **%s**: %s.\n", r.row, r.promise)
	}
	b.WriteString("\n## Not applicable\n\n")
	for i, reason := range reasons {
		fmt.Fprintf(&b, "%d. %s.\n", i+1, strings.ToUpper(reason[:1])+reason[1:])
	}
	return b.String()
}
