package export

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hubclient "github.com/informerhub/informerhub/clients/go"
)

// Sink publishes one route's changes, and keeps its resume point with
// them.
type Sink interface {
	// Resume returns the resume token written with the last change the
	// sink holds of the route; "" when it holds none.
	Resume(ctx context.Context) (string, error)
	// Publish publishes changes in order, each with its resume token, and
	// returns once the sink holds them all. After an error it may hold
	// any first part of them, never a later change without the earlier
	// ones: the route then asks Resume where to go on from. acknowledged
	// is how many the sink is known to hold.
	Publish(ctx context.Context, changes []Change) (acknowledged int, err error)
}

// Route exports what a selector selects to a sink.
type Route struct {
	Name     string
	Selector hubclient.Selector
	Sink     Sink
	// MaxBatch is how many changes are published together at most; 0:
	// 256. It bounds the changes a route holds: a slow sink slows the
	// watch, and the hub's history carries the rest.
	MaxBatch int
	// Retry is the wait after a failed publish, doubled up to a minute;
	// 0: one second.
	Retry   time.Duration
	Log     *slog.Logger
	Metrics *Metrics // nil: none
}

// Run exports until ctx ends, or an error no retry can fix (the hub
// refusing the selector, the caller's credentials or access).
func (r *Route) Run(ctx context.Context, client *hubclient.Client) error {
	log := r.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("route", r.Name)
	wait := r.Retry
	if wait <= 0 {
		wait = time.Second
	}
	initial := wait
	for {
		progressed, err := r.export(ctx, client, log)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if permanent(err) {
			return err
		}
		if progressed {
			wait = initial // a new failure, not the same one again
		}
		r.Metrics.failed(r.Name)
		log.Warn("export interrupted; resuming from what the sink holds", "error", err, "after", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return ctx.Err()
		}
		wait = min(2*wait, time.Minute)
	}
}

// export watches from the sink's resume point and publishes until an
// error; progressed reports whether the sink acknowledged any change.
func (r *Route) export(ctx context.Context, client *hubclient.Client, log *slog.Logger) (progressed bool, err error) {
	token, err := r.Sink.Resume(ctx)
	if err != nil {
		return false, err
	}
	log.Info("exporting", "resumeToken", token != "")
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := client.Watch(ctx, r.Selector, hubclient.WatchOptions{ResumeToken: token, SendInitialEvents: token == ""})
	defer w.Close()
	maxBatch := r.MaxBatch
	if maxBatch <= 0 {
		maxBatch = 256
	}
	type next struct {
		e   hubclient.Event
		err error
	}
	// The reader runs ahead of the sink by at most maxBatch events.
	events := make(chan next, maxBatch)
	go func() {
		defer close(events)
		for {
			e, err := w.Next()
			select {
			case events <- next{e, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	batch := make([]Change, 0, maxBatch)
	for {
		n, ok := <-events
		if !ok {
			return progressed, ctx.Err()
		}
		for {
			if n.err != nil {
				return progressed, n.err
			}
			c, isChange, err := changeOf(r.Selector.Resource, n.e)
			if err != nil {
				return progressed, err
			}
			if isChange {
				batch = append(batch, c)
			}
			if len(batch) == maxBatch || len(events) == 0 {
				break
			}
			n = <-events
		}
		if len(batch) == 0 {
			continue
		}
		acked, err := r.Sink.Publish(ctx, batch)
		r.Metrics.acknowledged(r.Name, batch[:acked], float64(time.Now().UnixNano())/1e9)
		progressed = progressed || acked > 0
		if err != nil {
			return progressed, err
		}
		batch = batch[:0]
	}
}

// permanent reports whether a retry cannot fix err.
func permanent(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated, codes.Unimplemented:
		return true
	}
	return errors.Is(err, errPermanent)
}

// errPermanent marks a sink's error no retry can fix.
var errPermanent = errors.New("export: cannot be retried")
