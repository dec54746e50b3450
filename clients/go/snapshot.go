package hubclient

import (
	"context"
	"errors"
	"io"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// Snapshot is every matching object at one point in time.
type Snapshot struct {
	// Objects are the objects as JSON, ordered by namespace and name,
	// projected by SnapshotOptions.Fields.
	Objects [][]byte
	// FilterErrors is, parallel to Objects, why the selector's filter could
	// not decide on each object ("" where it decided; see
	// Event.FilterError); nil when it decided on every one.
	FilterErrors []string
	// ResumeToken is the snapshot's point in time: a Watch from it
	// delivers exactly the changes after the snapshot.
	ResumeToken string
	// ResourceVersion is the snapshot's Kubernetes resourceVersion;
	// informational.
	ResourceVersion string
}

// SnapshotOptions says what a snapshot's objects carry.
type SnapshotOptions struct {
	// Fields projects the objects, as WatchOptions.Fields does: the paths
	// to keep; empty keeps everything.
	Fields []string
}

// Snapshot returns every object that matches sel, all from one point in
// time. It tries each replica once on errors a retry can fix.
func (c *Client) Snapshot(ctx context.Context, sel Selector) (*Snapshot, error) {
	return c.SnapshotWithOptions(ctx, sel, SnapshotOptions{})
}

// SnapshotWithOptions is Snapshot with options: the objects projected to
// some fields. A Watch from its ResumeToken with the same Fields continues
// it.
func (c *Client) SnapshotWithOptions(ctx context.Context, sel Selector, opts SnapshotOptions) (*Snapshot, error) {
	req := &informerhubv1.SnapshotRequest{Selector: sel.proto(), Fields: slices.Clone(opts.Fields)}
	return retry(ctx, c, func(svc informerhubv1.InformerHubServiceClient) (*Snapshot, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stream, err := svc.Snapshot(ctx, req)
		if err != nil {
			return nil, err
		}
		snap := &Snapshot{}
		for {
			page, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return nil, status.Error(codes.Unavailable, "the snapshot ended before its last page")
			}
			if err != nil {
				return nil, err
			}
			if errs := page.GetFilterErrors(); len(errs) > 0 {
				if len(errs) != len(page.GetObjects()) {
					return nil, status.Errorf(codes.Internal, "a snapshot page of %d objects has %d filter errors", len(page.GetObjects()), len(errs))
				}
				if snap.FilterErrors == nil {
					snap.FilterErrors = make([]string, len(snap.Objects))
				}
				snap.FilterErrors = append(snap.FilterErrors, errs...)
			} else if snap.FilterErrors != nil {
				snap.FilterErrors = append(snap.FilterErrors, make([]string, len(page.GetObjects()))...)
			}
			for _, o := range page.GetObjects() {
				snap.Objects = append(snap.Objects, []byte(o))
			}
			snap.ResumeToken, snap.ResourceVersion = page.GetResumeToken(), page.GetResourceVersion()
			if page.GetLast() {
				return snap, nil
			}
		}
	})
}

// Resource is a resource type the cluster serves, with the hub's activity.
type Resource struct {
	schema.GroupVersionResource
	Kind       string
	Namespaced bool
	// InformerActive, Subscribers and CachedObjects describe what the
	// replica that answered is doing with it, across all namespaces: they
	// are zero when ListResources was asked about one namespace.
	InformerActive bool
	Subscribers    int
	CachedObjects  int
	// SelectableFields are the fields a Selector.FieldSelector may name for
	// this resource type, as the API server supports them, sorted (aliases
	// the API server also accepts, such as pods' spec.host for
	// spec.nodeName, are not listed).
	SelectableFields []string
	// ShortNames and SingularName are the other names kubectl takes for
	// the type ("cm", "configmap").
	ShortNames   []string
	SingularName string
	// Forbidden is set only by ListResourcesWithOptions with
	// IncludeForbidden: the caller may not list and watch the type there.
	Forbidden bool
	// PrinterColumns are a custom resource version's
	// additionalPrinterColumns, as its CRD gives them; empty for types no
	// CRD defines (see the proto's Resource.printer_columns).
	PrinterColumns []PrinterColumn
}

// PrinterColumn is a column of a custom resource's table: its values are
// at JSONPath in each object (the first match); kubectl get shows those of
// Priority 0, -o wide the others.
type PrinterColumn struct {
	Name, Type, Format, Description string
	Priority                        int32
	JSONPath                        string
}

// ListResources lists the resource types the cluster serves that the
// caller may list and watch in namespace; with an empty namespace, those it
// may list and watch cluster-wide. A hub that authorizes by RBAC shows a
// caller bound only in some namespaces nothing cluster-wide.
func (c *Client) ListResources(ctx context.Context, namespace string) ([]Resource, error) {
	return c.ListResourcesWithOptions(ctx, ListResourcesOptions{Namespace: namespace})
}

// ListResourcesOptions says what ListResourcesWithOptions lists.
type ListResourcesOptions struct {
	// Namespace: the types the caller may list and watch there; empty:
	// cluster-wide.
	Namespace string
	// IncludeForbidden lists the other watchable types too, marked
	// Forbidden, with their names only: so that a name can be resolved as
	// kubectl does, and a watch of a type the caller may not read fails
	// with the hub's PERMISSION_DENIED, which says why, rather than as
	// unknown.
	IncludeForbidden bool
}

// ListResourcesWithOptions is ListResources with options.
func (c *Client) ListResourcesWithOptions(ctx context.Context, opts ListResourcesOptions) ([]Resource, error) {
	return retry(ctx, c, func(svc informerhubv1.InformerHubServiceClient) ([]Resource, error) {
		resp, err := svc.ListResources(ctx, &informerhubv1.ListResourcesRequest{Namespace: opts.Namespace, IncludeForbidden: opts.IncludeForbidden})
		if err != nil {
			return nil, err
		}
		out := make([]Resource, len(resp.GetResources()))
		for i, r := range resp.GetResources() {
			out[i] = Resource{
				GroupVersionResource: schema.GroupVersionResource{Group: r.GetGroup(), Version: r.GetVersion(), Resource: r.GetResource()},
				Kind:                 r.GetKind(),
				Namespaced:           r.GetNamespaced(),
				InformerActive:       r.GetInformerActive(),
				Subscribers:          int(r.GetSubscribers()),
				CachedObjects:        int(r.GetCachedObjects()),
				SelectableFields:     r.GetSelectableFields(),
				ShortNames:           r.GetShortNames(),
				SingularName:         r.GetSingularName(),
				Forbidden:            r.GetForbidden(),
			}
			for _, c := range r.GetPrinterColumns() {
				out[i].PrinterColumns = append(out[i].PrinterColumns, PrinterColumn{Name: c.GetName(), Type: c.GetType(),
					Format: c.GetFormat(), Description: c.GetDescription(), Priority: c.GetPriority(), JSONPath: c.GetJsonPath()})
			}
		}
		return out, nil
	})
}

// retry runs call on the current replica, and on the next ones while it
// fails with UNAVAILABLE (each replica at most once).
func retry[T any](ctx context.Context, c *Client, call func(informerhubv1.InformerHubServiceClient) (T, error)) (T, error) {
	var zero T
	var err error
	for range c.endpoints {
		var svc informerhubv1.InformerHubServiceClient
		var endpoint int
		if svc, endpoint, err = c.service(); err != nil {
			if errors.Is(err, ErrClientClosed) {
				return zero, err
			}
			c.failed(endpoint)
			continue
		}
		var out T
		if out, err = call(svc); err == nil {
			return out, nil
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return zero, err
		}
		c.failed(endpoint)
	}
	return zero, err
}
