package export

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

func TestSubjectTokensHoldNoSeparatorsOrWildcards(t *testing.T) {
	for in, want := range map[string]string{
		"":                  "_",
		"web-0":             "web-0",
		"kube-root-ca.crt":  "kube-root-ca%2Ecrt",
		"a*b>c d%e":         "a%2Ab%3Ec%20d%25e",
		"tab\tline\nreturn": "tab%09line%0Areturn",
	} {
		if got := subjectToken(in); got != want {
			t.Errorf("subjectToken(%q) = %q, want %q", in, got, want)
		}
	}
	subject, err := ParseSubject("k8s.{{.Group}}.{{.Resource}}.{{.Namespace}}.{{.Name}}")
	if err != nil {
		t.Fatal(err)
	}
	s := &JetStream{Subject: subject, Cluster: "c"}
	msg, _, err := s.message(Change{Type: hubclient.Added, Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Namespace: "demo", Name: "kube-root-ca.crt", ResourceVersion: "7", ResumeToken: "tok", Object: []byte("{}")}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "k8s._.configmaps.demo.kube-root-ca%2Ecrt" || msg.Header.Get(HeaderResumeToken) != "tok" || !bytes.Equal(msg.Data, []byte("{}")) {
		t.Errorf("message %q, headers %v, data %s", msg.Subject, msg.Header, msg.Data)
	}
}

func TestAChangesIDIsOfItsIdentityAlone(t *testing.T) {
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	c := Change{Type: hubclient.Modified, Resource: cm, Namespace: "demo", Name: "a", UID: "u1", ResourceVersion: "7", ResumeToken: "t1"}
	again := c
	again.ResumeToken, again.Object = "t2", []byte("{}") // exported again, from elsewhere
	if c.ID("prod") != again.ID("prod") || len(c.ID("prod")) != 32 {
		t.Errorf("the same change has ids %s and %s", c.ID("prod"), again.ID("prod"))
	}
	for _, other := range []Change{
		{Type: hubclient.Deleted, Resource: cm, UID: "u1", ResourceVersion: "7"},
		{Type: hubclient.Modified, Resource: cm, UID: "u2", ResourceVersion: "7"},
		{Type: hubclient.Modified, Resource: cm, UID: "u1", ResourceVersion: "8"},
		{Type: hubclient.Modified, Resource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, UID: "u1", ResourceVersion: "7"},
	} {
		if other.ID("prod") == c.ID("prod") {
			t.Errorf("%+v has the id of %+v", other, c)
		}
	}
	if c.ID("prod") == c.ID("staging") {
		t.Error("the same change in two clusters has one id")
	}
}

func TestBookmarksAreNoChanges(t *testing.T) {
	if _, ok, err := changeOf(schema.GroupVersionResource{}, hubclient.Event{Type: hubclient.Bookmark}); ok || err != nil {
		t.Errorf("a bookmark: %v, %v", ok, err)
	}
	if _, _, err := changeOf(schema.GroupVersionResource{}, hubclient.Event{Type: hubclient.Added, Object: []byte("{")}); err == nil {
		t.Error("an object that is not JSON made a change")
	}
}

func TestAGapsDifferencesTakeWhatIsHeldToWhatIsListed(t *testing.T) {
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	held := map[ObjectKey]Held{
		{"a", "same"}:      {UID: "u1", ResourceVersion: "5"},
		{"a", "changed"}:   {UID: "u2", ResourceVersion: "5"},
		{"a", "gone"}:      {UID: "u3", ResourceVersion: "5", Identity: []byte(`{"metadata":{"name":"gone"}}`)},
		{"a", "recreated"}: {UID: "u4", ResourceVersion: "5"},
	}
	listed := []Change{
		{Type: hubclient.Added, Resource: cm, Namespace: "a", Name: "recreated", UID: "u9", ResourceVersion: "9"},
		{Type: hubclient.Added, Resource: cm, Namespace: "a", Name: "same", UID: "u1", ResourceVersion: "5"},
		{Type: hubclient.Added, Resource: cm, Namespace: "a", Name: "new", UID: "u5", ResourceVersion: "8"},
		{Type: hubclient.Added, Resource: cm, Namespace: "a", Name: "changed", UID: "u2", ResourceVersion: "7"},
	}
	var got []string
	for _, c := range differences(cm, held, listed, "10", "before", "after") {
		got = append(got, fmt.Sprintf("%s %s %s@%s %s", c.Type, c.Name, c.UID, c.ResourceVersion, c.ResumeToken))
	}
	want := []string{
		"DELETED gone u3@10 before", "DELETED recreated u4@10 before",
		"MODIFIED changed u2@7 ", "ADDED new u5@8 ", "ADDED recreated u9@9 ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("differences:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestAGapsIDsAreItsOwn(t *testing.T) {
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	made := Change{Type: hubclient.Added, Resource: cm, UID: "u1", ResourceVersion: "7", ResumeToken: "t1"}
	listed := made
	listed.Resync, listed.ResumeToken, listed.Gap = true, "before", "after"
	again := listed
	again.ResumeToken = "another" // the same listing, published again
	later := listed
	later.Gap = "later" // another listing
	if made.ID("c") == listed.ID("c") || listed.ID("c") != again.ID("c") || listed.ID("c") == later.ID("c") {
		t.Error("a gap's difference has the id of the change that made the object, or of another gap's, or another when published again")
	}
	start := Change{Type: GapStart, Resource: cm, ResourceVersion: "10", ResumeToken: "before", Gap: "after"}
	end := Change{Type: GapEnd, Resource: cm, ResourceVersion: "10", ResumeToken: "after", Gap: "after"}
	next := start
	next.Gap = "later"
	if start.ID("c") == end.ID("c") || start.ID("c") == next.ID("c") {
		t.Error("a gap's start has its end's id, or another gap's start's")
	}
}

func TestMetadataIsReadWhereverItIs(t *testing.T) {
	for _, object := range []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n","uid":"u","resourceVersion":"7"},"data":{"k":"v"}}`,
		`{"data":{"k":["v",{"metadata":"x"}]},"metadata":{"name":"a","namespace":"n","uid":"u","resourceVersion":"7"}}`,
	} {
		m, err := metadataOf([]byte(object))
		if err != nil || m != (objectMeta{Namespace: "n", Name: "a", UID: "u", ResourceVersion: "7"}) {
			t.Errorf("%s: %+v, %v", object, m, err)
		}
	}
	for _, object := range []string{``, `[]`, `{"data":{}}`, `{"metadata":`, `"x"`} {
		if _, err := metadataOf([]byte(object)); err == nil {
			t.Errorf("%q: no error", object)
		}
	}
}

// BenchmarkMetadataOf reads a 2 KiB ConfigMap's metadata as changeOf does,
// beside decoding the whole object into the same fields (what it did
// before), the baseline.
func BenchmarkMetadataOf(b *testing.B) {
	object := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n","uid":"u","resourceVersion":"7",` +
		`"managedFields":[{"manager":"m","operation":"Update","apiVersion":"v1","time":"2026-12-03T00:00:00Z"}]},"data":{"k":"` +
		strings.Repeat("x", 2048) + `"}}`)
	b.Run("metadataOf", func(b *testing.B) {
		for b.Loop() {
			if _, err := metadataOf(object); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("whole=baseline", func(b *testing.B) {
		for b.Loop() {
			var meta struct{ Metadata objectMeta }
			if err := json.Unmarshal(object, &meta); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// heldSink is a Holder whose consumers hold held.
type heldSink struct {
	Sink
	held map[ObjectKey]Held
}

func (s heldSink) Held(context.Context) (map[ObjectKey]Held, error) { return s.held, nil }

// A re-sync of a watch that started from a position, which lists nothing
// (every object deleted meanwhile), deletes what the consumers hold; a
// sink that cannot say what they hold gets a GAP_END that replaces.
func TestAnEmptyListingAfterAResumeDeletesWhatIsHeld(t *testing.T) {
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	end := hubclient.Event{Type: hubclient.Bookmark, Resync: true, ResyncReplaces: true, ResumeToken: "after", ResourceVersion: "9"}
	r := &Route{Selector: hubclient.Selector{Resource: cm},
		Sink: heldSink{held: map[ObjectKey]Held{{"a", "x"}: {UID: "u", ResourceVersion: "5", Identity: []byte(`{}`)}}}}
	changes, err := r.gap(context.Background(), &listingGap{before: "before"}, end)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, fmt.Sprintf("%s %s %s", c.Type, c.Name, c.ResumeToken))
	}
	if want := []string{"GAP_START  before", "DELETED x before", "GAP_END  after"}; !slices.Equal(got, want) {
		t.Errorf("the gap is %q, want %q", got, want)
	}
	r.Sink = &CloudEvents{}
	changes, err = r.gap(context.Background(), &listingGap{before: "before"}, end)
	if err != nil {
		t.Fatal(err)
	}
	if last := changes[len(changes)-1]; len(changes) != 2 || !last.Replaces {
		t.Errorf("the gap to a sink that is no Holder: %+v", changes)
	}
}

func TestAStreamMustTakeTheGapMarkersSubjects(t *testing.T) {
	for _, c := range []struct {
		filter, subject string
		match           bool
	}{
		{"k8s.>", "k8s.a.b", true}, {"k8s.*.b", "k8s.a.b", true}, {"k8s.*", "k8s.a.b", false},
		{"k8s.a.>", "k8s.a", false}, {"k8s.a.b", "k8s.a.b", true}, {"k8s.a.c", "k8s.a.b", false},
	} {
		if subjectMatches(c.filter, c.subject) != c.match {
			t.Errorf("%s takes %s: %v, want %v", c.filter, c.subject, !c.match, c.match)
		}
	}
	subject, err := ParseSubject("k8s.{{.Resource}}.{{.Namespace}}.{{.Name}}")
	if err != nil {
		t.Fatal(err)
	}
	s := &JetStream{Stream: "APPS", Subject: subject, Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}}
	if err := s.takesMarkers([]string{"k8s.configmaps.apps.>"}); !errors.Is(err, errPermanent) || !strings.Contains(err.Error(), "k8s.configmaps._._") {
		t.Errorf("a stream of one namespace's subjects: %v", err)
	}
	if err := s.takesMarkers([]string{"k8s.configmaps.apps.>", "k8s.configmaps._._"}); err != nil {
		t.Errorf("a stream that takes the markers: %v", err)
	}
}

// A start with a gap whose initial listing the SDK's watch re-synced
// halfway (its differences from the part listed follow it) leaves the
// consumers holding what the API server holds: the differences are
// folded into the listing before it is compared with what they hold.
func TestAReSyncWithinAStartsListingIsFoldedIntoIt(t *testing.T) {
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	object := func(name, uid, rv string) []byte {
		return fmt.Appendf(nil, `{"metadata":{"namespace":"ns","name":%q,"uid":%q,"resourceVersion":%q}}`, name, uid, rv)
	}
	r := &Route{Selector: hubclient.Selector{Resource: cm}, Sink: heldSink{held: map[ObjectKey]Held{
		{"ns", "x"}: {UID: "ux", ResourceVersion: "1"},
		{"ns", "y"}: {UID: "uy", ResourceVersion: "1"},
	}}}
	l := &listingGap{replaces: true, events: []hubclient.Event{
		{Type: hubclient.Added, Object: object("x", "ux", "5")},
		{Type: hubclient.Added, Object: object("y", "uy", "6")},
		// The re-sync: x deleted meanwhile, y changed, z new.
		{Type: hubclient.Deleted, Object: object("x", "ux", "5"), ResourceVersion: "20", Resync: true},
		{Type: hubclient.Modified, Object: object("y", "uy", "9"), Resync: true},
		{Type: hubclient.Added, Object: object("z", "uz", "8"), Resync: true},
	}}
	end := hubclient.Event{Type: hubclient.Bookmark, ResourceVersion: "20", ResumeToken: "end", Resync: true, InitialEventsEnd: true}
	changes, err := r.gap(context.Background(), l, end)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, fmt.Sprintf("%s %s@%s", c.Type, c.Name, c.ResourceVersion))
	}
	if want := []string{"GAP_START @20", "DELETED x@20", "MODIFIED y@9", "ADDED z@8", "GAP_END @20"}; !slices.Equal(got, want) {
		t.Errorf("the gap is %q, want %q", got, want)
	}
	r.Sink = &CloudEvents{}
	if changes, err = r.gap(context.Background(), l, end); err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, c := range changes {
		got = append(got, fmt.Sprintf("%s %s@%s", c.Type, c.Name, c.ResourceVersion))
	}
	if want := []string{"GAP_START @20", "ADDED y@9", "ADDED z@8", "GAP_END @20"}; !slices.Equal(got, want) {
		t.Errorf("the gap to a sink that is no Holder is %q, want %q", got, want)
	}
}

// onceHeld is a Holder that can be read back once.
type onceHeld struct {
	heldSink
	reads *int
}

func (s onceHeld) Held(ctx context.Context) (map[ObjectKey]Held, error) {
	if *s.reads++; *s.reads > 1 {
		return nil, errors.New("read back twice")
	}
	return s.heldSink.Held(ctx)
}

// A route with no position whose sink holds objects starts with a gap,
// and reads back what the sink holds once for it.
func TestAStartsGapReadsBackWhatIsHeldOnce(t *testing.T) {
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	reads := 0
	r := &Route{Selector: hubclient.Selector{Resource: cm},
		Sink: onceHeld{heldSink{held: map[ObjectKey]Held{{"ns", "gone"}: {UID: "u", ResourceVersion: "1", Identity: []byte(`{}`)}}}, &reads}}
	l, err := r.startingGap(context.Background())
	if err != nil || l == nil || !l.replaces {
		t.Fatalf("the starting gap: %+v, %v", l, err)
	}
	end := hubclient.Event{Type: hubclient.Bookmark, ResourceVersion: "9", ResumeToken: "end", InitialEventsEnd: true}
	changes, err := r.gap(context.Background(), l, end)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 3 || changes[1].Type != hubclient.Deleted || reads != 1 {
		t.Errorf("the gap %+v after %d reads", changes, reads)
	}
	empty := &Route{Sink: heldSink{held: map[ObjectKey]Held{}}}
	if l, err := empty.startingGap(context.Background()); l != nil || err != nil {
		t.Errorf("a sink that holds nothing: %+v, %v", l, err)
	}
}
