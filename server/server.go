package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/informerhub/shard"
	"github.com/informerhub/informerhub/informerhub/upstream"
	"github.com/informerhub/informerhub/server/auth"
	"github.com/informerhub/informerhub/server/metrics"
)

// ResumeTokenHeader is the response header of a Watch that carries the
// token of the position the stream starts from. It is sent as soon as the
// subscription is established, before any event.
const ResumeTokenHeader = "resume-token"

// Config tunes a Server.
type Config struct {
	// Authenticator identifies callers. Default: every caller is
	// anonymous (only for --auth=none and tests).
	Authenticator auth.Authenticator
	// Authorizer decides what callers may list and watch. Default: they
	// may do anything (only for --auth=none and tests).
	Authorizer auth.Authorizer
	// AuthzRecheckInterval is how often a Watch's or Count's caller is
	// authenticated and authorized again. When access is revoked, or the
	// credentials are no longer accepted, the stream ends
	// (PERMISSION_DENIED, UNAUTHENTICATED), a Watch with the token to
	// resume from; when the API server cannot confirm access for
	// maxUnconfirmedRechecks intervals, with UNAVAILABLE. It also bounds
	// how old a cached decision may be when a call is admitted. So a
	// change in RBAC applies to new calls within an interval, and ends
	// running streams within one and three quarters, plus
	// denialConfirmDelay (rechecks come at random, three quarters to one
	// and a quarter of it apart, so streams opened together spread their
	// reviews). Default: 1m.
	AuthzRecheckInterval time.Duration

	// MaxSubscriptionsPerIdentity bounds the Watch, Snapshot and Count
	// streams one identity has open at once. Default: 100.
	MaxSubscriptionsPerIdentity int
	// MaxSubscriptions bounds the Watch, Snapshot and Count streams of all
	// identities together, so that many identities cannot take more than
	// the replica can serve. Default: 20000.
	MaxSubscriptions int
	// RatePerIdentity and RateBurstPerIdentity bound the calls one
	// identity makes: this many per second on average, and the burst at
	// once. Defaults: 10 and 50.
	RatePerIdentity      float64
	RateBurstPerIdentity int
	// MaxConcurrentStreams bounds the streams of one connection.
	// Default: 100.
	MaxConcurrentStreams uint32
	// MaxWatchesPerStream bounds the watches of one WatchMany; each counts
	// as a stream against MaxSubscriptionsPerIdentity and MaxSubscriptions.
	// Default: 32.
	MaxWatchesPerStream int
	// MaxRecvMsgSize bounds a request. Default: 64 KiB.
	MaxRecvMsgSize int
	// KeepaliveTime and KeepaliveTimeout find dead clients: a connection
	// quiet for KeepaliveTime is pinged, and closed if no answer comes
	// within KeepaliveTimeout. Defaults: 1m and 20s.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// KeepaliveMinTime is the shortest ping interval a client may use;
	// clients that ping more often are disconnected. Default: 10s.
	KeepaliveMinTime time.Duration

	// MaxSendStall ends a stream whose client has not read anything for
	// this long (a send to it has been blocked throughout), with
	// RESOURCE_EXHAUSTED, so a client that stops reading cannot hold on to
	// the hub's resources. It is checked every MaxSendStall, so such a
	// stream ends after between one and two of it. Default: 30s.
	MaxSendStall time.Duration
	// StalledSendGrace is how long a stream that must end (its
	// subscription failed, a recheck found the caller's access gone, Drain)
	// waits for a send that is blocked on a client that stopped reading,
	// before it cuts the send off. Over HTTP, where the status can only
	// follow the blocked send, the client then has as long again to read
	// on and receive it. Default: 1s.
	StalledSendGrace time.Duration
	// CORSAllowedOrigins are the origins whose pages may call the service
	// from a browser (HTTPHandler), such as "https://portal.example.com";
	// "*" allows every origin. Default: none (same-origin pages only, such
	// as the console).
	CORSAllowedOrigins []string

	// Metrics, when set, counts and times every call (go-grpc-middleware's
	// prometheus provider) and records snapshot latencies. Default: none.
	Metrics *metrics.Metrics
	// Logger receives the service's logs. Default: slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Authenticator == nil {
		c.Authenticator = auth.Anonymous{}
	}
	if c.Authorizer == nil {
		c.Authorizer = auth.AlwaysAllow{}
	}
	defaultTo(&c.AuthzRecheckInterval, time.Minute)
	defaultTo(&c.MaxSubscriptionsPerIdentity, 100)
	defaultTo(&c.MaxSubscriptions, 20000)
	defaultTo(&c.RatePerIdentity, 10)
	defaultTo(&c.RateBurstPerIdentity, 50)
	defaultTo(&c.MaxConcurrentStreams, 100)
	defaultTo(&c.MaxWatchesPerStream, 32)
	defaultTo(&c.MaxRecvMsgSize, 64<<10)
	defaultTo(&c.KeepaliveTime, time.Minute)
	defaultTo(&c.KeepaliveTimeout, 20*time.Second)
	defaultTo(&c.KeepaliveMinTime, 10*time.Second)
	defaultTo(&c.MaxSendStall, 30*time.Second)
	defaultTo(&c.StalledSendGrace, time.Second)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func defaultTo[T int | uint32 | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Server implements informerhub.v1.InformerHubService on a Hub.
type Server struct {
	informerhubv1.UnimplementedInformerHubServiceServer
	hub           *informerhub.Hub
	cfg           Config
	log           *slog.Logger
	subscriptions *auth.SubscriptionLimiter
	interceptors  interceptors // of every protocol
	watches       watches      // the running Watches and Counts, for Drain
	// drained is done once Drain has returned (markDrained): health
	// Watches end then (HealthService).
	drained     context.Context
	markDrained context.CancelFunc
}

var _ informerhubv1.InformerHubServiceServer = (*Server)(nil)

// New returns a Server for hub.
func New(hub *informerhub.Hub, cfg Config) *Server {
	cfg.setDefaults()
	drained, markDrained := context.WithCancel(context.Background())
	return &Server{hub: hub, cfg: cfg, log: cfg.Logger, interceptors: newInterceptors(cfg),
		subscriptions: auth.NewSubscriptionLimiter(cfg.MaxSubscriptionsPerIdentity, cfg.MaxSubscriptions),
		drained:       drained, markDrained: markDrained}
}

// Register registers the service on s.
func (s *Server) Register(g *grpc.Server) {
	informerhubv1.RegisterInformerHubServiceServer(g, s)
}

func (s *Server) Watch(req *informerhubv1.WatchRequest, stream grpc.ServerStreamingServer[informerhubv1.WatchResponse]) error {
	r, ok := s.watches.start(s, stream)
	if !ok {
		return toStatus(s.log, informerhub.ErrClosed)
	}
	defer s.watches.end(r)
	return serveFrom(s, r, func() (*informerhub.Subscription, func(), error) { return s.openWatch(r, req) },
		// The codec sends the event's shared encoding (see codec.go).
		func(ev *informerhub.Event) (any, *string) { return ev, &ev.ResumeToken })
}

// openWatch admits and subscribes a Watch, sends its header, and sets up
// how r ends; it returns the status to end with on failure.
func (s *Server) openWatch(r *streamRun, req *informerhubv1.WatchRequest) (sub *informerhub.Subscription, release func(), err error) {
	ctx := r.ctx
	sel, admitted, err := s.admit(ctx, req.GetSelector())
	if err != nil {
		return nil, nil, toStatus(s.log, err)
	}
	defer func() {
		if err != nil {
			admitted()
		}
	}()
	encoding, err := encodingOf(req.GetObjectFormat(), wireJSON(ctx))
	if err != nil {
		return nil, nil, toStatus(s.log, err)
	}
	user, _ := auth.UserFrom(ctx)
	wr := informerhub.WatchRequest{
		Selector:          sel,
		ResumeToken:       req.GetResumeToken(),
		SendInitialEvents: req.GetSendInitialEvents(),
		Fields:            req.GetFields(),
		IncludePrevious:   req.GetIncludePrevious(),
		Encoding:          encoding,
		Owner:             user.Name,
		Woken:             r.woken(),
	}
	sub, err = s.hub.Watch(ctx, wr)
	if err != nil {
		if errors.Is(context.Cause(ctx), errDraining) {
			// Drained while it waited (for a replay slot, say).
			err = &drainedError{resumeToken: req.GetResumeToken()}
		}
		return nil, nil, toStatus(s.log, err)
	}
	// The subscription is established: say so at once, with the token of
	// its start, so a client whose stream drops before any event can still
	// resume exactly.
	if err := r.stream.SendHeader(metadata.Pairs(ResumeTokenHeader, sub.ResumeToken())); err != nil {
		sub.Close()
		return nil, nil, toStatus(s.log, err)
	}
	r.setToken(sub.ResumeToken())
	if wr.Woken != nil {
		r.out.handed = sub.Handed
	}
	// One selector for both functions, which the stream keeps while it
	// runs, rather than a copy in each.
	sels := []informerhub.Selector{sel}
	r.ending = func(cause error) error {
		return toStatus(s.log, s.watchEnded(r, cause, sub.Err, sels[0].Resource))
	}
	r.watchFailure(sub.AfterFail)
	r.recheck(func(ctx context.Context) error {
		_, err := s.recheckAccess(ctx, sels)
		return err
	})
	return sub, admitted, nil
}

// watchEnded returns why a running Watch (or WatchMany) ended, err being
// what ended it, with the token to resume from: that of the last response
// handed to the client, not the last the subscription handed out. subErr
// is the subscription's Err; resource names the resource type of a stream
// whose client stopped reading.
func (s *Server) watchEnded(r *streamRun, err error, subErr func() error, resource schema.GroupVersionResource) error {
	if errors.Is(err, errDraining) {
		err = &drainedError{}
	}
	if errors.Is(err, errStalled) {
		// Why the subscription failed, if it did (overflow, informer
		// stopped); else the client stopped reading while nothing failed.
		if err = subErr(); err == nil {
			err = &informerhub.TooSlowError{Resource: resource, Stalled: true}
		}
	}
	var tooSlow *informerhub.TooSlowError
	var lost *accessLostError
	var drained *drainedError
	switch {
	case errors.As(err, &tooSlow):
		copied := *tooSlow
		copied.ResumeToken = r.lastToken()
		if we := watchErrorOf(err); we != nil {
			return &informerhub.WatchError{Index: we.Index, Err: &copied}
		}
		return &copied
	case errors.As(err, &lost):
		lost.resumeToken = r.lastToken()
	case errors.As(err, &drained):
		drained.resumeToken = r.lastToken()
	case errors.Is(err, informerhub.ErrUnavailable):
		// The informer could not go on (the API server delivered nothing
		// for too long): the client resumes once it can.
		err = &upstreamLostError{err: err, resumeToken: r.lastToken()}
	default:
		// Any other ending of a running stream (a token that expired
		// while it caught up, a selector the API server refuses on a
		// replay, a replay's state over its budget, an object it could
		// not send, its resource type gone) says where to resume too,
		// when its status has an ErrorInfo to carry it.
		err = &endedAtError{err: err, resumeToken: r.lastToken()}
	}
	return err
}

// admit converts a Watch, Snapshot or Count request's selector, and checks
// that the caller may list and watch what it selects and may open one more
// stream. Call release when the stream ends.
func (s *Server) admit(ctx context.Context, req *informerhubv1.ResourceSelector) (sel informerhub.Selector, release func(), err error) {
	if s.watches.isDraining() {
		return sel, nil, informerhub.ErrClosed
	}
	if sel, err = selectorOf(req); err != nil {
		return sel, nil, err
	}
	// Syntax first: nothing malformed or oversized reaches a review, a
	// cache key or the log.
	if err := s.hub.CheckSyntax(sel); err != nil {
		return sel, nil, err
	}
	// The call's log line says what it was for.
	cl := callLogOf(ctx)
	cl.resources, cl.namespace = []schema.GroupVersionResource{sel.Resource}, sel.Namespace
	user, _ := auth.UserFrom(ctx)
	if err := s.authorize(ctx, user, sel.Resource, sel.Namespace, s.cfg.AuthzRecheckInterval); err != nil {
		return sel, nil, err
	}
	if err := s.subscriptions.Acquire(user.Name); err != nil {
		return sel, nil, err
	}
	return sel, func() { s.subscriptions.Release(user.Name) }, nil
}

// recheckAccess checks a running Watch's caller again: its credentials (a
// token that expired or whose service account was deleted, a certificate
// past its NotAfter), then what they may do with each of sels (a
// WatchMany's watches: the index of the first not allowed is returned with
// its error, -1 for the credentials). The previous recheck's decision is an
// interval old; asking for decisions at most half an interval old reaches
// the API server every interval, yet shares a decision another stream of
// the same caller made moments ago.
func (s *Server) recheckAccess(ctx context.Context, sels []informerhub.Selector) (index int, err error) {
	ctx = auth.ForRecheck(ctx) // a budget of its own
	user, err := s.cfg.Authenticator.Authenticate(ctx)
	switch {
	case errors.Is(err, auth.ErrUnauthenticated):
		return -1, err
	case err != nil:
		return -1, &authUnavailableError{err: err}
	}
	maxAge := s.cfg.AuthzRecheckInterval / 2
	if ctx.Value(freshDecisionsKey{}) != nil {
		maxAge = 0
	}
	for i, sel := range sels {
		if err := s.authorize(ctx, user, sel.Resource, sel.Namespace, maxAge); err != nil {
			return i, err
		}
	}
	return -1, nil
}

// authorize checks that user may list and watch gvr in namespace, with
// decisions at most maxAge old: nil, an *auth.ForbiddenError, or an
// *authUnavailableError when the API server cannot tell now.
func (s *Server) authorize(ctx context.Context, user auth.User, gvr schema.GroupVersionResource, namespace string, maxAge time.Duration) error {
	err := auth.CanWatch(ctx, s.cfg.Authorizer, user, gvr, namespace, maxAge)
	var forbidden *auth.ForbiddenError
	if err != nil && !errors.As(err, &forbidden) {
		return &authUnavailableError{err: err}
	}
	return err
}

// authUnavailableError: the hub cannot check a caller's credentials or
// access now (the API server does not answer, or refuses the hub's own
// reviews). Retrying later can succeed.
type authUnavailableError struct{ err error }

func (e *authUnavailableError) Error() string {
	return "cannot check the caller's access now: " + e.err.Error()
}
func (e *authUnavailableError) Unwrap() error { return e.err }

// upstreamLostError ends a running Watch whose informer could not go on;
// the client resumes from resumeToken.
type upstreamLostError struct {
	err         error
	resumeToken string
}

func (e *upstreamLostError) Error() string { return e.err.Error() }
func (e *upstreamLostError) Unwrap() error { return e.err }

// accessLostError ends a running Watch whose caller's access a recheck did
// not confirm: revoked (an *auth.ForbiddenError), credentials no longer
// accepted (auth.ErrUnauthenticated), or not checkable for too long (an
// *authUnavailableError). The client resumes from resumeToken once access
// is back; a Count, which has none, leaves it empty.
type accessLostError struct {
	err         error
	resumeToken string
}

func (e *accessLostError) Error() string { return e.err.Error() }
func (e *accessLostError) Unwrap() error { return e.err }

func (s *Server) Snapshot(req *informerhubv1.SnapshotRequest, stream grpc.ServerStreamingServer[informerhubv1.SnapshotResponse]) error {
	ctx := stream.Context()
	sel, release, err := s.admit(ctx, req.GetSelector())
	if err != nil {
		return toStatus(s.log, err)
	}
	defer release()
	encoding, err := encodingOf(req.GetObjectFormat(), false)
	if err != nil {
		return toStatus(s.log, err)
	}
	began := time.Now()
	snap, err := s.hub.Snapshot(ctx, informerhub.SnapshotRequest{Selector: sel, Fields: req.GetFields()})
	if err != nil {
		return toStatus(s.log, err)
	}
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.ObserveSnapshot(sel.Resource, time.Since(began))
	}
	defer snap.Close()
	r := s.newStreamRun(stream, "")
	defer r.finish()
	r.ending = func(err error) error {
		if errors.Is(err, errStalled) {
			// Its token means "after the whole snapshot": useless to a
			// client that did not read it all.
			return withDetails(codes.ResourceExhausted, "the client stopped reading the snapshot: take it again, and read it to the end",
				&errdetails.ErrorInfo{Reason: ReasonSubscriberTooSlow, Domain: ErrorDomain,
					Metadata: resourceMetadata(sel.Resource.Group, sel.Resource.Version, sel.Resource.Resource)})
		}
		return toStatus(s.log, err)
	}
	return r.serve(func(ctx context.Context) (any, *string, bool, error) {
		page, err := snap.NextPage(ctx)
		if err != nil {
			return nil, nil, false, err
		}
		resp := &informerhubv1.SnapshotResponse{
			ResumeToken:     snap.ResumeToken(),
			ResourceVersion: snap.ResourceVersion(),
			Last:            page.Last,
			FilterErrors:    page.FilterErrors,
		}
		if encoding == encodingStruct {
			if resp.ObjectStructs = structsOf(page.Objects); resp.ObjectStructs != nil {
				return resp, nil, page.Last, nil
			}
		}
		// JSON strings, as asked, or because an object of the page cannot
		// be a Struct (see maxStructDepth): as a Watch does.
		resp.Objects = page.Objects
		return resp, nil, page.Last, nil
	})
}

func (s *Server) ListResources(ctx context.Context, req *informerhubv1.ListResourcesRequest) (*informerhubv1.ListResourcesResponse, error) {
	// Each namespace asked about costs reviews: only real names.
	if ns := req.GetNamespace(); ns != "" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return nil, toStatus(s.log, &informerhub.RequestError{Field: "namespace", Err: informerhub.ErrInvalidRequest,
				Reason: fmt.Sprintf("%q is not a valid namespace: %s", ns, strings.Join(errs, "; "))})
		}
	}
	resources, err := s.hub.Resources(ctx)
	if err != nil {
		return nil, toStatus(s.log, err)
	}
	// Only what the caller may list and watch here. One question first: a
	// caller whose RBAC grants every resource (a "*" rule) costs two
	// reviews, not two per resource type. Otherwise one (cached) check per
	// resource type, a few at a time.
	user, _ := auth.UserFrom(ctx)
	everything := schema.GroupVersionResource{Group: "*", Version: "*", Resource: "*"}
	err = s.authorize(ctx, user, everything, req.GetNamespace(), s.cfg.AuthzRecheckInterval)
	var forbidden *auth.ForbiddenError
	if err != nil && !errors.As(err, &forbidden) {
		return nil, toStatus(s.log, err)
	}
	allowAll := err == nil
	allowed := make([]bool, len(resources))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, r := range resources {
		if req.GetNamespace() != "" && !r.Namespaced {
			continue
		}
		if allowAll {
			allowed[i] = true
			continue
		}
		g.Go(func() error {
			err := s.authorize(gctx, user, r.Resource, req.GetNamespace(), s.cfg.AuthzRecheckInterval)
			var forbidden *auth.ForbiddenError
			if errors.As(err, &forbidden) {
				return nil
			}
			allowed[i] = err == nil
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, toStatus(s.log, err)
	}
	resp := &informerhubv1.ListResourcesResponse{MaxWatchesPerStream: uint32(s.cfg.MaxWatchesPerStream)}
	for i, r := range resources {
		if req.GetNamespace() != "" && !r.Namespaced || !allowed[i] && !req.GetIncludeForbidden() {
			continue
		}
		res := &informerhubv1.Resource{
			Group:        r.Resource.Group,
			Version:      r.Resource.Version,
			Resource:     r.Resource.Resource,
			Kind:         r.Kind,
			Namespaced:   r.Namespaced,
			ShortNames:   r.ShortNames,
			SingularName: r.SingularName,
		}
		if !allowed[i] {
			// Names only: what discovery tells any authenticated user.
			res.Forbidden = true
			resp.Resources = append(resp.Resources, res)
			continue
		}
		// The hub's activity spans every namespace: only for a caller
		// allowed to see them all.
		if req.GetNamespace() == "" {
			res.InformerActive, res.Subscribers, res.CachedObjects = r.InformerActive, uint32(r.Subscribers), uint64(r.CachedObjects)
			res.HistoryEvents, res.HistoryBytes, res.HistoryResourceVersion = uint32(r.HistoryEvents), uint64(r.HistoryBytes), r.HistoryResourceVersion
			res.RetainedResourceVersion, res.Retained = r.RetainedResourceVersion, r.Retained
			if !r.RetainedSince.IsZero() {
				res.RetainedSince = timestamppb.New(r.RetainedSince)
			}
		}
		res.SelectableFields = r.FieldSet().Names()
		res.ShardFields = shardFields
		res.PrinterColumns = printerColumnsOf(r.PrinterColumns)
		resp.Resources = append(resp.Resources, res)
	}
	return resp, nil
}

// printerColumnsOf is a custom resource's printer columns as the API
// gives them; nil for none (a built-in type).
func printerColumnsOf(columns []upstream.PrinterColumn) []*informerhubv1.PrinterColumn {
	if len(columns) == 0 {
		return nil
	}
	out := make([]*informerhubv1.PrinterColumn, len(columns))
	for i, c := range columns {
		out[i] = &informerhubv1.PrinterColumn{
			Name:        c.Name,
			Type:        c.Type,
			Format:      c.Format,
			Description: c.Description,
			Priority:    c.Priority,
			JsonPath:    c.JSONPath,
		}
	}
	return out
}

// shardFields are the fields a shard selector may hash, of every resource
// type.
var shardFields = []string{shard.KeyUID, shard.KeyNamespace}

// structsOf converts a snapshot page's objects into Structs; nil if one of
// them cannot be.
func structsOf(objects []string) []*structpb.Struct {
	structs := make([]*structpb.Struct, len(objects))
	for i, o := range objects {
		st, err := structOf(o)
		if err != nil {
			return nil
		}
		structs[i] = st
	}
	return structs
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
		Filter:        sel.GetFilter(),
		ShardSelector: sel.GetShardSelector(),
	}, nil
}

// onOwnStack runs f on a goroutine of its own, and waits for it: f's
// stack, however deep (admission, the subscription's setup, the first
// send), is not kept by the caller's goroutine, which holds a stream for
// hours at the depth it waits at (see stream.go). The Go runtime keeps a
// goroutine's stack at the most it needed, unless it waits at less than a
// quarter of it: a handler that grew to 16 KiB for its setup would keep
// them. A panic of f's is returned, a *panicError (INTERNAL, logged: see
// toStatus), so that it ends that call only.
func onOwnStack(f func()) (panicked error) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if v := recover(); v != nil {
				panicked = &panicError{value: v, stack: debug.Stack()}
			}
		}()
		f()
	}()
	<-done
	return panicked
}
