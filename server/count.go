package server

import (
	"context"
	"errors"

	"google.golang.org/grpc"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server/auth"
)

// Count streams the counts of a selection: admitted as a Watch is (with
// group_by checked first, before any review), from the hub's counter
// shared by every caller of the same request, supervised as a Watch is
// (rechecked access, Drain, a client that stops reading). Counts carry no
// token: a Count that ends is called again.
func (s *Server) Count(req *informerhubv1.CountRequest, stream grpc.ServerStreamingServer[informerhubv1.CountResponse]) error {
	r, ok := s.watches.start(s, stream)
	if !ok {
		return toStatus(s.log, &drainedError{})
	}
	defer s.watches.end(r)
	return serveFrom(s, r, func() (*informerhub.CountSubscription, func(), error) { return s.openCount(r, req) },
		// The codec sends its shared encoding (see codec.go).
		func(c *informerhub.Counts) (any, *string) { return c, nil })
}

// openCount admits and starts a Count, and sets up how r ends; it returns
// the status to end with on failure.
func (s *Server) openCount(r *streamRun, req *informerhubv1.CountRequest) (counts *informerhub.CountSubscription, release func(), err error) {
	ctx := r.ctx
	// Syntax first, as admit checks the selector's: a malformed group_by
	// costs no review.
	if err := informerhub.CheckGroupBy(req.GetGroupBy()); err != nil {
		return nil, nil, toStatus(s.log, err)
	}
	sel, release, err := s.admit(ctx, req.GetSelector())
	if err != nil {
		return nil, nil, toStatus(s.log, err)
	}
	user, _ := auth.UserFrom(ctx)
	counts, err = s.hub.Count(ctx, informerhub.CountRequest{Selector: sel, GroupBy: req.GetGroupBy(), Owner: user.Name})
	if err != nil {
		release()
		return nil, nil, toStatus(s.log, countError(ctx, err))
	}
	sels := []informerhub.Selector{sel}
	r.ending = func(err error) error {
		if errors.Is(err, errStalled) {
			// Why the counter failed, if it did; else the client stopped
			// reading while nothing failed.
			if err = counts.Err(); err == nil {
				err = &informerhub.TooSlowError{Resource: sels[0].Resource, Stalled: true, Counting: true}
			}
		}
		return toStatus(s.log, countError(ctx, err))
	}
	r.watchFailure(counts.AfterFail)
	r.recheck(func(ctx context.Context) error {
		_, err := s.recheckAccess(ctx, sels)
		return err
	})
	return counts, release, nil
}

// countError is err as it ends a Count: drained (by Drain, or the hub
// closing under it) without a token.
func countError(ctx context.Context, err error) error {
	if errors.Is(context.Cause(ctx), errDraining) || errors.Is(err, errDraining) || errors.Is(err, informerhub.ErrClosed) {
		return &drainedError{}
	}
	return err
}

// countResponse is the CountResponse of c. Its groups are c's own map,
// which nothing modifies: every stream sends the one map, none copies it.
func countResponse(c *informerhub.Counts) *informerhubv1.CountResponse {
	return &informerhubv1.CountResponse{Groups: c.Groups, Total: c.Total, ResourceVersion: c.ResourceVersion}
}
