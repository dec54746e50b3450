package server

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/runtime/schema"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
)

// Config tunes a Server.
type Config struct {
	// StalledSendGrace is how long a Watch whose subscription has failed
	// (its queue overflowed) waits for a send that is blocked on a client
	// that stopped reading, before ending the stream anyway. Default: 1s.
	StalledSendGrace time.Duration
	// Logger receives the service's logs. Default: slog.Default().
	Logger *slog.Logger
}

// Server implements informerhub.v1.InformerHubService on a Hub.
type Server struct {
	informerhubv1.UnimplementedInformerHubServiceServer
	hub *informerhub.Hub
	cfg Config
	log *slog.Logger
}

var _ informerhubv1.InformerHubServiceServer = (*Server)(nil)

// New returns a Server for hub.
func New(hub *informerhub.Hub, cfg Config) *Server {
	if cfg.StalledSendGrace <= 0 {
		cfg.StalledSendGrace = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server{hub: hub, cfg: cfg, log: cfg.Logger}
}

// Register registers the service on s.
func (s *Server) Register(g *grpc.Server) {
	informerhubv1.RegisterInformerHubServiceServer(g, s)
}

func (s *Server) Watch(req *informerhubv1.WatchRequest, stream grpc.ServerStreamingServer[informerhubv1.WatchResponse]) error {
	ctx := stream.Context()
	sel, err := selectorOf(req.GetSelector())
	if err != nil {
		return toStatus(s.log, err)
	}
	sub, err := s.hub.Watch(ctx, informerhub.WatchRequest{
		Selector:          sel,
		ResumeToken:       req.GetResumeToken(),
		SendInitialEvents: req.GetSendInitialEvents(),
	})
	if err != nil {
		return toStatus(s.log, err)
	}
	defer sub.Close()

	// One goroutine owns the stream's sends. This one ends the stream when
	// the subscription fails while that goroutine is stuck sending to a
	// client that stopped reading: returning from the handler is what
	// unblocks such a send.
	p := &pump{sub: sub, stream: stream}
	p.lastSent.Store(new(sub.ResumeToken()))
	done := make(chan error, 1)
	go func() { done <- p.run(ctx) }()
	select {
	case err = <-done:
	case <-sub.Done():
		grace := time.NewTimer(s.cfg.StalledSendGrace)
		defer grace.Stop()
		select {
		case err = <-done:
		case <-grace.C:
			err = sub.Err()
			s.log.Warn("ending a stream whose client stopped reading", "error", err)
		}
	}
	// The client resumes from what it received, not from what the
	// subscription handed out last.
	var tooSlow *informerhub.TooSlowError
	if errors.As(err, &tooSlow) {
		copied := *tooSlow
		copied.ResumeToken = *p.lastSent.Load()
		err = &copied
	}
	return toStatus(s.log, err)
}

// pump sends a subscription's events on a stream.
type pump struct {
	sub      *informerhub.Subscription
	stream   grpc.ServerStreamingServer[informerhubv1.WatchResponse]
	lastSent atomic.Pointer[string] // token of the last event handed to gRPC
}

func (p *pump) run(ctx context.Context) error {
	for {
		ev, err := p.sub.Next(ctx)
		if err != nil {
			return err
		}
		// The codec sends the event's shared encoding (see codec.go).
		if err := p.stream.SendMsg(ev); err != nil {
			return err
		}
		p.lastSent.Store(&ev.ResumeToken)
	}
}

func (s *Server) Snapshot(req *informerhubv1.SnapshotRequest, stream grpc.ServerStreamingServer[informerhubv1.SnapshotResponse]) error {
	sel, err := selectorOf(req.GetSelector())
	if err != nil {
		return toStatus(s.log, err)
	}
	snap, err := s.hub.Snapshot(stream.Context(), sel)
	if err != nil {
		return toStatus(s.log, err)
	}
	defer snap.Close()
	for {
		objects, last := snap.NextPage()
		if err := stream.Send(&informerhubv1.SnapshotResponse{
			Objects:         objects,
			ResumeToken:     snap.ResumeToken(),
			ResourceVersion: snap.ResourceVersion(),
			Last:            last,
		}); err != nil {
			return err
		}
		if last {
			return nil
		}
	}
}

func (s *Server) ListResources(ctx context.Context, _ *informerhubv1.ListResourcesRequest) (*informerhubv1.ListResourcesResponse, error) {
	resources, err := s.hub.Resources(ctx)
	if err != nil {
		return nil, toStatus(s.log, err)
	}
	resp := &informerhubv1.ListResourcesResponse{Resources: make([]*informerhubv1.Resource, len(resources))}
	for i, r := range resources {
		resp.Resources[i] = &informerhubv1.Resource{
			Group:          r.Resource.Group,
			Version:        r.Resource.Version,
			Resource:       r.Resource.Resource,
			Kind:           r.Kind,
			Namespaced:     r.Namespaced,
			InformerActive: r.InformerActive,
			Subscribers:    uint32(r.Subscribers),
			CachedObjects:  uint64(r.CachedObjects),
		}
	}
	return resp, nil
}

func selectorOf(sel *informerhubv1.ResourceSelector) (informerhub.Selector, error) {
	if sel == nil {
		return informerhub.Selector{}, &informerhub.RequestError{Field: informerhub.FieldSelector, Err: informerhub.ErrInvalidRequest,
			Reason: `selector is required, e.g. {"version": "v1", "resource": "configmaps"}`}
	}
	return informerhub.Selector{
		Resource:      schema.GroupVersionResource{Group: sel.GetGroup(), Version: sel.GetVersion(), Resource: sel.GetResource()},
		Namespace:     sel.GetNamespace(),
		LabelSelector: sel.GetLabelSelector(),
		FieldSelector: sel.GetFieldSelector(),
	}, nil
}
