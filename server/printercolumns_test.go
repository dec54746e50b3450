package server

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/hubtest"
	"github.com/informerhub/informerhub/informerhub/upstream"
)

// TestListResourcesGivesACustomResourcesPrinterColumns: a custom
// resource's additionalPrinterColumns reach the client with every
// attribute, in their order; a built-in type has none.
func TestListResourcesGivesACustomResourcesPrinterColumns(t *testing.T) {
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	cluster := hubtest.NewCluster(t)
	cluster.Serve(t, upstream.ResourceInfo{Resource: widgets, Kind: "Widget", Namespaced: true, PrinterColumns: []upstream.PrinterColumn{
		{Name: "Color", Type: "string", Description: "the paint", JSONPath: ".spec.color"},
		{Name: "Size", Type: "integer", Format: "int32", Priority: 1, JSONPath: ".spec.size"},
	}})
	hub := informerhub.New(informerhub.Config{Logger: discard, EncodeEvent: EncodeEvent}, cluster, cluster)
	resp, err := serve(t, hub).ListResources(context.Background(), &informerhubv1.ListResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	columns := map[string][]*informerhubv1.PrinterColumn{}
	for _, r := range resp.GetResources() {
		columns[r.GetResource()] = r.GetPrinterColumns()
	}
	want := map[string][]*informerhubv1.PrinterColumn{
		"configmaps": nil,
		"widgets": {
			{Name: "Color", Type: "string", Description: "the paint", JsonPath: ".spec.color"},
			{Name: "Size", Type: "integer", Format: "int32", Priority: 1, JsonPath: ".spec.size"},
		},
	}
	for resource, w := range want {
		got, ok := columns[resource]
		if !ok {
			t.Errorf("%s not listed", resource)
			continue
		}
		if diff := cmp.Diff(w, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s's printer columns (-want +got):\n%s", resource, diff)
		}
	}
}
