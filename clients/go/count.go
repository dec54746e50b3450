package hubclient

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// Counts is how many objects a Count selects, at one point in time.
type Counts struct {
	// Groups counts the objects per group value ("" for objects without
	// the label or path); nil when the Count has no grouping. Groups at
	// zero are left out.
	Groups map[string]uint64
	// Total counts all the selected objects.
	Total uint64
	// ResourceVersion is the Kubernetes resourceVersion of the state the
	// counts describe; informational.
	ResourceVersion string
}

// Counter delivers the live counts of a Count: the current counts first,
// then new ones whenever they change (at most once per the hub's
// --count-interval). Counts are state, not events: after a reconnection,
// which it makes on its own (with backoff, moving to another replica when
// one fails), the next counts are simply the current ones.
//
// Errors that retrying cannot fix end it, as they end a Watcher
// (INVALID_ARGUMENT, such as a group_by that is not a name, label or path;
// NOT_FOUND; PERMISSION_DENIED; UNAUTHENTICATED at the call; UNIMPLEMENTED).
//
// A Counter is for one goroutine; Close may be called from any.
type Counter struct {
	client   *Client
	req      *informerhubv1.CountRequest
	ctx      context.Context
	cancel   context.CancelFunc
	stream   grpc.ServerStreamingClient[informerhubv1.CountResponse]
	endStrm  context.CancelFunc
	endpoint int // the replica the stream is on
	// reconnection: its failures, the backoff, and their logging. Its up
	// is set once the stream delivered counts: an error after it ended a
	// running stream rather than refused the call.
	reconnection
	err error
}

// Count starts counting the objects sel selects, grouped by groupBy: ""
// (the total only), "namespace", "label:<key>", or a path such as
// "status.phase" (see CountRequest.group_by). It connects on the first
// call to Next.
func (c *Client) Count(ctx context.Context, sel Selector, groupBy string) *Counter {
	ctx, cancel := context.WithCancel(ctx)
	return &Counter{client: c, ctx: ctx, cancel: cancel, reconnection: reconnection{client: c},
		req: &informerhubv1.CountRequest{Selector: sel.proto(), GroupBy: groupBy}}
}

// Close ends the counting; Next then returns context.Canceled.
func (c *Counter) Close() { c.cancel() }

// Next returns the next counts. It blocks until there are any,
// reconnecting as often as needed, and returns an error only when the
// counting has ended.
func (c *Counter) Next() (Counts, error) {
	for {
		if c.err == nil && c.ctx.Err() != nil {
			c.err = c.ctx.Err()
		}
		if c.err != nil {
			return Counts{}, c.err
		}
		if c.stream == nil {
			c.connect()
			continue
		}
		resp, err := c.stream.Recv()
		if err != nil {
			c.streamFailed(err)
			continue
		}
		if !c.delivered { // a check first: the logger is made only when needed
			c.responded(c.log())
		}
		return Counts{Groups: resp.GetGroups(), Total: resp.GetTotal(), ResourceVersion: resp.GetResourceVersion()}, nil
	}
}

// log is the client's logger, with the resource counted.
func (c *Counter) log() *slog.Logger {
	return c.client.cfg.log.With("resource", c.req.GetSelector().GetResource())
}

func (c *Counter) connect() {
	svc, endpoint, err := c.attempt(c.ctx, c.log())
	switch {
	case err != nil:
		c.err = err
		return
	case svc == nil:
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	stream, err := svc.Count(ctx, c.req)
	c.endpoint = endpoint
	if err != nil {
		cancel()
		c.streamFailed(err)
		return
	}
	c.stream, c.endStrm = stream, cancel
}

func (c *Counter) streamFailed(err error) {
	if c.endStrm != nil {
		c.endStrm()
	}
	c.stream, c.endStrm = nil, nil
	if c.ctx.Err() != nil {
		c.err = c.ctx.Err()
		return
	}
	if errors.Is(err, io.EOF) {
		err = status.Error(codes.Unavailable, "the hub ended the stream")
	}
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unimplemented:
		c.err = err
	case codes.Unauthenticated:
		if !c.up {
			c.err = err
			return
		}
		// The credentials that opened the stream expired while it ran:
		// reconnect, with the token source's current ones.
		fallthrough
	default:
		// The counts are state: whatever ended the stream, the next one
		// starts with the current counts.
		c.failed(err, c.endpoint, c.log())
	}
}
