package integration

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
)

// TestBadRequestsGetClearStatuses sends every kind of bad Watch and Snapshot
// request and checks the exact code, the ErrorInfo reason and, for invalid
// arguments, the field named in a BadRequest detail.
func TestBadRequestsGetClearStatuses(t *testing.T) {
	ns := namespace(t)
	// On the API server without a watch cache, which answers 410 Gone as
	// soon as etcd compacts a version.
	h := startHubAt(t, etcdAPIServer(t).Config, informerhub.Config{HistorySize: 5})

	// A token that falls out of the 5-change history, and whose version
	// etcd then compacts: neither the hub nor the API server can replay it.
	first, _ := openWatch(t, h.client, &informerhubv1.WatchRequest{Selector: watchSelector(ns), SendInitialEvents: true})
	_, end := initialEvents(t, first)
	for i := range 8 {
		createConfigMap(t, ns, fmt.Sprint("cm-", i), nil, "")
	}
	for range 8 { // the hub has seen them all: the history has moved past end
		first.next(t)
	}
	if _, err := cluster.Compact(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	expired := end.ResumeToken

	nsStream, _ := openWatch(t, h.client, &informerhubv1.WatchRequest{
		Selector: &informerhubv1.ResourceSelector{Version: "v1", Resource: "namespaces"}, SendInitialEvents: true})
	_, nsEnd := initialEvents(t, nsStream)

	sel := func(mod func(*informerhubv1.ResourceSelector)) *informerhubv1.ResourceSelector {
		s := watchSelector(ns)
		mod(s)
		return s
	}
	tests := []struct {
		name      string
		req       *informerhubv1.WatchRequest
		code      codes.Code
		reason    string
		field     string
		inMessage string
	}{
		{"no selector", &informerhubv1.WatchRequest{}, codes.InvalidArgument, "INVALID_ARGUMENT", "selector", "selector is required"},
		{"no version", &informerhubv1.WatchRequest{Selector: sel(func(s *informerhubv1.ResourceSelector) { s.Version = "" })},
			codes.InvalidArgument, "INVALID_ARGUMENT", "selector.version", "version is required"},
		{"no resource", &informerhubv1.WatchRequest{Selector: sel(func(s *informerhubv1.ResourceSelector) { s.Resource = "" })},
			codes.InvalidArgument, "INVALID_ARGUMENT", "selector.resource", "resource is required"},
		{"unknown resource", &informerhubv1.WatchRequest{Selector: sel(func(s *informerhubv1.ResourceSelector) { s.Resource = "configmapz" })},
			codes.NotFound, "RESOURCE_NOT_FOUND", "", "ListResources"},
		{"unknown group", &informerhubv1.WatchRequest{Selector: sel(func(s *informerhubv1.ResourceSelector) { s.Group = "nope.example.com" })},
			codes.NotFound, "RESOURCE_NOT_FOUND", "", `group version "nope.example.com/v1"`},
		{"subresource", &informerhubv1.WatchRequest{Selector: sel(func(s *informerhubv1.ResourceSelector) { s.Resource = "pods/status" })},
			codes.InvalidArgument, "INVALID_ARGUMENT", "selector.resource", "subresource"},
		{"resource that cannot be watched", &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{
			Group: "authentication.k8s.io", Version: "v1", Resource: "tokenreviews"}},
			codes.InvalidArgument, "INVALID_ARGUMENT", "selector.resource", "does not support list and watch"},
		{"namespace of a cluster-scoped resource", &informerhubv1.WatchRequest{Selector: &informerhubv1.ResourceSelector{
			Version: "v1", Resource: "namespaces", Namespace: ns}},
			codes.InvalidArgument, "INVALID_ARGUMENT", "selector.namespace", "cluster-scoped"},
		{"invalid namespace", &informerhubv1.WatchRequest{Selector: sel(func(s *informerhubv1.ResourceSelector) { s.Namespace = "Bad_NS" })},
			codes.InvalidArgument, "INVALID_ARGUMENT", "selector.namespace", "not a valid namespace"},
		{"invalid label selector", &informerhubv1.WatchRequest{Selector: sel(func(s *informerhubv1.ResourceSelector) { s.LabelSelector = "app in (web" })},
			codes.InvalidArgument, "INVALID_ARGUMENT", "selector.label_selector", ""},
		{"unsupported field", &informerhubv1.WatchRequest{Selector: sel(func(s *informerhubv1.ResourceSelector) { s.FieldSelector = "status.phase=Running" })},
			codes.InvalidArgument, "INVALID_ARGUMENT", "selector.field_selector", "supported fields: metadata.name, metadata.namespace"},
		{"huge label selector", &informerhubv1.WatchRequest{Selector: sel(func(s *informerhubv1.ResourceSelector) { s.LabelSelector = strings.Repeat("a", 5000) })},
			codes.InvalidArgument, "INVALID_ARGUMENT", "selector.label_selector", "longer than"},
		{"label selector with too many terms", &informerhubv1.WatchRequest{Selector: sel(func(s *informerhubv1.ResourceSelector) { s.LabelSelector = terms("k%d=v", 65) })},
			codes.InvalidArgument, "INVALID_ARGUMENT", "selector.label_selector", "has 65 terms; at most 64"},
		{"huge field selector", &informerhubv1.WatchRequest{Selector: sel(func(s *informerhubv1.ResourceSelector) {
			s.FieldSelector = "metadata.name=" + strings.Repeat("a", 5000)
		})},
			codes.InvalidArgument, "INVALID_ARGUMENT", "selector.field_selector", "longer than"},
		{"field selector with too many terms", &informerhubv1.WatchRequest{Selector: sel(func(s *informerhubv1.ResourceSelector) { s.FieldSelector = terms("metadata.name!=n%d", 65) })},
			codes.InvalidArgument, "INVALID_ARGUMENT", "selector.field_selector", "has 65 terms; at most 64"},
		{"malformed token", &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: "garbage"},
			codes.InvalidArgument, "INVALID_RESUME_TOKEN", "resume_token", "not a resume token"},
		{"damaged token", &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: expired[:len(expired)-2] + "xx"},
			codes.InvalidArgument, "INVALID_RESUME_TOKEN", "resume_token", ""},
		{"token of another resource", &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: nsEnd.ResumeToken},
			codes.InvalidArgument, "INVALID_RESUME_TOKEN", "resume_token", `issued for "namespaces.v1"`},
		{"expired token", &informerhubv1.WatchRequest{Selector: watchSelector(ns), ResumeToken: expired},
			codes.OutOfRange, "RESUME_TOKEN_EXPIRED", "", "call Snapshot, or Watch with send_initial_events"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream, _ := openWatch(t, h.client, tt.req)
			checkStatus(t, stream.end(t), tt.code, tt.reason, tt.field, tt.inMessage)
			if tt.req.ResumeToken != "" || tt.req.Selector == nil {
				return
			}
			// Snapshot validates its selector the same way.
			snap, err := h.client.Snapshot(ctxFor(t), &informerhubv1.SnapshotRequest{Selector: tt.req.Selector})
			if err != nil {
				t.Fatal(err)
			}
			checkStatus(t, readStream(snap.Recv).end(t), tt.code, tt.reason, tt.field, tt.inMessage)
		})
	}
}

// terms joins n requirements made from format.
func terms(format string, n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i)
	}
	return strings.Join(out, ",")
}

func checkStatus(t *testing.T, err error, code codes.Code, reason, field, inMessage string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != code {
		t.Fatalf("status %v, want %v", st, code)
	}
	if !strings.Contains(st.Message(), inMessage) {
		t.Errorf("message %q does not say %q", st.Message(), inMessage)
	}
	info := errorInfo(t, err)
	if info.Reason != reason || info.Domain != "informerhub.io" {
		t.Errorf("ErrorInfo %v, want reason %s in domain informerhub.io", info, reason)
	}
	if field == "" {
		return
	}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.FieldViolations) == 1 && br.FieldViolations[0].Field == field {
			return
		}
	}
	t.Errorf("no BadRequest detail on field %s in %v", field, st.Details())
}
