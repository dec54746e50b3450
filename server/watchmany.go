package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/runtime/schema"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server/auth"
)

func (s *Server) WatchMany(req *informerhubv1.WatchManyRequest, stream grpc.ServerStreamingServer[informerhubv1.WatchManyResponse]) error {
	r, ok := s.watches.start(s, stream)
	if !ok {
		return toStatus(s.log, informerhub.ErrClosed)
	}
	defer s.watches.end(r)
	return serveFrom(s, r, func() (*informerhub.ManySubscription, func(), error) { return s.openWatchMany(r, req) },
		// The codec wraps the event's shared encoding (see codec.go).
		func(ev *informerhub.ManyEvent) (any, *string) { return ev, &ev.ResumeToken })
}

// openWatchMany admits and subscribes a WatchMany, sends its header, and
// sets up how r ends; it returns the status to end with on failure.
func (s *Server) openWatchMany(r *streamRun, req *informerhubv1.WatchManyRequest) (sub *informerhub.ManySubscription, release func(), err error) {
	ctx := r.ctx
	watches, release, err := s.admitMany(ctx, req.GetWatches())
	if err != nil {
		return nil, nil, s.watchManyStatus(err)
	}
	sub, err = s.hub.WatchMany(ctx, informerhub.WatchManyRequest{Watches: watches, ResumeToken: req.GetResumeToken()})
	if err != nil {
		release()
		if errors.Is(context.Cause(ctx), errDraining) {
			err = &drainedError{resumeToken: req.GetResumeToken()}
		}
		return nil, nil, s.watchManyStatus(err)
	}
	if err := r.stream.SendHeader(metadata.Pairs(ResumeTokenHeader, sub.ResumeToken())); err != nil {
		sub.Close()
		release()
		return nil, nil, toStatus(s.log, err)
	}
	r.setToken(sub.ResumeToken())
	sels := make([]informerhub.Selector, len(watches))
	for i, w := range watches {
		sels[i] = w.Selector
	}
	r.ending = func(cause error) error {
		return s.watchManyStatus(s.watchEnded(r, cause, sub.Err, schema.GroupVersionResource{}))
	}
	r.watchFailure(sub.AfterFail)
	r.recheck(func(ctx context.Context) error {
		i, err := s.recheckAccess(ctx, sels)
		if err != nil && i >= 0 {
			return &informerhub.WatchError{Index: i, Err: err}
		}
		return err
	})
	return sub, release, nil
}

// admitMany converts a WatchMany's watches, and checks that the caller may
// list and watch what each selects and may open as many more streams. All
// the watches' syntax is checked before any review. Call release when the
// stream ends.
func (s *Server) admitMany(ctx context.Context, reqs []*informerhubv1.WatchRequest) (watches []informerhub.WatchRequest, release func(), err error) {
	if s.watches.isDraining() {
		return nil, nil, informerhub.ErrClosed
	}
	if n := len(reqs); n == 0 || n > s.cfg.MaxWatchesPerStream {
		return nil, nil, &informerhub.RequestError{Field: informerhub.FieldWatches, Err: informerhub.ErrInvalidRequest,
			Reason: fmt.Sprintf("give between 1 and %d watches (the hub's --max-watches-per-stream), not %d", s.cfg.MaxWatchesPerStream, n)}
	}
	user, _ := auth.UserFrom(ctx)
	watches = make([]informerhub.WatchRequest, len(reqs))
	resources := make([]schema.GroupVersionResource, len(reqs))
	for i, req := range reqs {
		sel, err := selectorOf(req.GetSelector())
		if err == nil {
			err = s.hub.CheckSyntax(sel)
		}
		var encoding informerhub.Encoding
		if err == nil {
			encoding, err = encodingOf(req.GetObjectFormat(), wireJSON(ctx))
		}
		if err != nil {
			return nil, nil, informerhub.WatchErrorAt(i, err)
		}
		watches[i] = informerhub.WatchRequest{
			Selector:          sel,
			ResumeToken:       req.GetResumeToken(),
			SendInitialEvents: req.GetSendInitialEvents(),
			Fields:            req.GetFields(),
			IncludePrevious:   req.GetIncludePrevious(),
			Encoding:          encoding,
			Owner:             user.Name,
		}
		resources[i] = sel.Resource
	}
	callLogOf(ctx).resources = resources
	// Each watch costs what a Watch call costs (its filter compiled, its
	// reviews): the rate limit charged the call once, the rest now.
	if err := s.interceptors.rate.LimitN(ctx, len(watches)-1); err != nil {
		return nil, nil, status.Error(codes.ResourceExhausted, err.Error()+": retry later")
	}
	for i, w := range watches {
		if err := s.authorize(ctx, user, w.Selector.Resource, w.Selector.Namespace, s.cfg.AuthzRecheckInterval); err != nil {
			return nil, nil, &informerhub.WatchError{Index: i, Err: err}
		}
	}
	if err := s.subscriptions.AcquireN(user.Name, len(watches)); err != nil {
		return nil, nil, err
	}
	return watches, func() { s.subscriptions.ReleaseN(user.Name, len(watches)) }, nil
}

// watchManyStatus is toStatus for a WatchMany: an error of one of its
// watches carries that watch's index in its ErrorInfo metadata.
func (s *Server) watchManyStatus(err error) error {
	st := toStatus(s.log, err)
	we := watchErrorOf(err)
	if we == nil {
		return st
	}
	return withMetadata(st, "index", strconv.Itoa(we.Index))
}

// watchErrorOf returns the *informerhub.WatchError err holds, if any.
func watchErrorOf(err error) *informerhub.WatchError {
	var we *informerhub.WatchError
	if errors.As(err, &we) {
		return we
	}
	return nil
}
