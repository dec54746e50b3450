package hubclient_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/labels"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// hubAddress is where the demo hub of the examples listens.
var hubAddress string

func TestMain(m *testing.M) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	g := grpc.NewServer()
	informerhubv1.RegisterInformerHubServiceServer(g, demoHub{})
	go g.Serve(lis) //nolint:errcheck // ends with Stop
	hubAddress = lis.Addr().String()
	code := m.Run()
	g.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// demoHub serves three ConfigMaps in namespace "demo" that never change.
type demoHub struct {
	informerhubv1.UnimplementedInformerHubServiceServer
}

type demoObject struct {
	name, app, rv string
}

var demoObjects = []demoObject{{"db-2", "db", "12"}, {"web-0", "web", "10"}, {"web-1", "web", "11"}}

const demoResourceVersion, demoToken = "12", "demo-token"

func (o demoObject) json() string {
	return fmt.Sprintf(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":"demo","uid":"uid-%s","resourceVersion":%q,"labels":{"app":%q}},"data":{"greeting":"hello"}}`,
		o.name, o.name, o.rv, o.app)
}

func (demoHub) matching(sel *informerhubv1.ResourceSelector) ([]demoObject, error) {
	selector, err := labels.Parse(sel.GetLabelSelector())
	if err != nil {
		return nil, err
	}
	var out []demoObject
	for _, o := range demoObjects {
		if (sel.GetNamespace() == "" || sel.GetNamespace() == "demo") && selector.Matches(labels.Set{"app": o.app}) {
			out = append(out, o)
		}
	}
	return out, nil
}

func (h demoHub) Watch(req *informerhubv1.WatchRequest, stream grpc.ServerStreamingServer[informerhubv1.WatchResponse]) error {
	objects, err := h.matching(req.GetSelector())
	if err != nil {
		return err
	}
	if req.GetSendInitialEvents() {
		for _, o := range objects {
			if err := stream.Send(&informerhubv1.WatchResponse{Type: informerhubv1.EventType_EVENT_TYPE_ADDED, Object: o.json(),
				ResourceVersion: o.rv, ResumeToken: "demo-initial-" + o.name}); err != nil {
				return err
			}
		}
		if err := stream.Send(&informerhubv1.WatchResponse{Type: informerhubv1.EventType_EVENT_TYPE_BOOKMARK,
			ResourceVersion: demoResourceVersion, ResumeToken: demoToken, InitialEventsEnd: true}); err != nil {
			return err
		}
	}
	<-stream.Context().Done() // nothing ever changes
	return nil
}

func (h demoHub) Snapshot(req *informerhubv1.SnapshotRequest, stream grpc.ServerStreamingServer[informerhubv1.SnapshotResponse]) error {
	objects, err := h.matching(req.GetSelector())
	if err != nil {
		return err
	}
	page := &informerhubv1.SnapshotResponse{ResumeToken: demoToken, ResourceVersion: demoResourceVersion, Last: true}
	for _, o := range objects {
		projected, err := demoProject(o.json(), req.GetFields())
		if err != nil {
			return err
		}
		page.Objects = append(page.Objects, projected)
	}
	return stream.Send(page)
}

// demoProject keeps the fields of an object that plain dotted paths name,
// and its identity; enough of the hub's projection for the examples.
func demoProject(object string, fields []string) (string, error) {
	if len(fields) == 0 {
		return object, nil
	}
	var in map[string]any
	if err := json.Unmarshal([]byte(object), &in); err != nil {
		return "", err
	}
	out := map[string]any{}
	for _, path := range append(fields, "apiVersion", "kind", "metadata.name", "metadata.namespace", "metadata.uid", "metadata.resourceVersion") {
		from, to, names := in, out, strings.Split(path, ".")
		for _, name := range names[:len(names)-1] {
			child, ok := from[name].(map[string]any)
			if !ok {
				break
			}
			if to[name] == nil {
				to[name] = map[string]any{}
			}
			from, to = child, to[name].(map[string]any)
		}
		if v, ok := from[names[len(names)-1]]; ok {
			to[names[len(names)-1]] = v
		}
	}
	b, err := json.Marshal(out)
	return string(b), err
}

func (demoHub) ListResources(context.Context, *informerhubv1.ListResourcesRequest) (*informerhubv1.ListResourcesResponse, error) {
	return &informerhubv1.ListResourcesResponse{Resources: []*informerhubv1.Resource{
		{Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespaced: true, SelectableFields: []string{"metadata.name", "metadata.namespace"}},
	}}, nil
}
