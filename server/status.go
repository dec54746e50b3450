package server

import (
	"context"
	"errors"
	"log/slog"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server/auth"
)

// ErrorDomain is the domain of every google.rpc.ErrorInfo the service sends.
const ErrorDomain = "informerhub.io"

// Reasons of google.rpc.ErrorInfo details, one per situation a client
// handles differently. The proto's comments (InformerHubService) say what
// each means to a client; a test keeps the two lists the same.
const (
	ReasonInvalidArgument      = "INVALID_ARGUMENT"
	ReasonInvalidResumeToken   = "INVALID_RESUME_TOKEN"
	ReasonResourceNotFound     = "RESOURCE_NOT_FOUND"
	ReasonResumeTokenExpired   = "RESUME_TOKEN_EXPIRED"
	ReasonResumeTokenAhead     = "RESUME_TOKEN_AHEAD"
	ReasonSubscriberTooSlow    = "SUBSCRIBER_TOO_SLOW"
	ReasonUpstreamUnavailable  = "UPSTREAM_UNAVAILABLE"
	ReasonShuttingDown         = "SHUTTING_DOWN"
	ReasonUnauthenticated      = "UNAUTHENTICATED"
	ReasonForbidden            = "FORBIDDEN"
	ReasonTooManySubscriptions = "TOO_MANY_SUBSCRIPTIONS"
	ReasonTooManyDistinct      = "TOO_MANY_DISTINCT"
	ReasonReplayLimit          = "REPLAY_LIMIT"
	ReasonTooManyTokenReviews  = "TOO_MANY_TOKEN_REVIEWS"
	ReasonObjectUnsendable     = "OBJECT_UNSENDABLE"
	ReasonTooManyGroups        = "TOO_MANY_GROUPS"
)

// toStatus is the one place where the hub's errors become gRPC statuses.
// Messages say what to do; internal details stay in the logs. An error
// that already is a status (gRPC's own: the client went away mid-send) is
// returned as it is; any other is the status of the first of statusRules
// that matches it, or INTERNAL.
func toStatus(log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	for _, rule := range statusRules {
		if st, ok := rule(log, err); ok {
			var ended *endedAtError
			if errors.As(err, &ended) {
				st = withMetadata(st, "resume_token", ended.resumeToken)
			}
			return st
		}
	}
	return internal(log, err)
}

// endedAtError is why a running Watch or WatchMany ended, with the token
// of the last response handed to its client: every such ending tells the
// client where to resume from (see Server.watchEnded), whatever its code.
type endedAtError struct {
	err         error
	resumeToken string
}

func (e *endedAtError) Error() string { return e.err.Error() }
func (e *endedAtError) Unwrap() error { return e.err }

// A statusRule returns the status of an error it matches.
type statusRule func(log *slog.Logger, err error) (st error, ok bool)

// statusRules map the hub's errors to statuses, first match first. The
// order matters where one error wraps another: a stream ended for lost
// access (accessLostError) carries why access was lost (a ForbiddenError,
// ErrUnauthenticated, an authUnavailableError), which decides its code; a
// drained stream is ErrClosed; an informer that could not go on is a
// ResourceError wrapping ErrUnavailable, which only a bare ErrUnavailable
// rule after it would catch otherwise.
var statusRules = []statusRule{
	// The call's own end.
	whenIs(context.Canceled, canceledStatus),
	whenIs(informerhub.ErrSubscriptionClosed, canceledStatus),
	whenIs(context.DeadlineExceeded, func(*slog.Logger, error) error {
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed")
	}),
	// Who may call, before what was asked.
	whenAs(forbiddenStatus),
	whenIs(auth.ErrUnauthenticated, unauthenticatedStatus),
	whenAs(authUnavailableStatus),
	whenAs(func(_ *slog.Logger, e *auth.TooManyReviewsError, _ error) error {
		return withDetails(codes.ResourceExhausted, e.Error(), errorInfo(ReasonTooManyTokenReviews, nil))
	}),
	// Limits on what callers take.
	whenAs(tooManySubscriptionsStatus),
	whenAs(limitStatus),
	whenAs(func(log *slog.Logger, _ *panicError, err error) error {
		log.Error("panic in a stream's handler", "error", err)
		return status.Error(codes.Internal, "internal error")
	}),
	// What was asked.
	whenAs(requestStatus),
	whenAs(func(_ *slog.Logger, e *informerhub.ExpiredError, _ error) error {
		return withDetails(codes.OutOfRange, e.Error(), errorInfo(ReasonResumeTokenExpired, resourceMetadata(e.Resource.Group, e.Resource.Version, e.Resource.Resource)))
	}),
	whenAs(tooSlowStatus),
	// The hub, and its upstream.
	whenIs(informerhub.ErrClosed, shuttingDownStatus),
	whenAs(func(_ *slog.Logger, e *informerhub.ObjectError, _ error) error {
		// The core logged it when it made the event.
		md := resourceMetadata(e.Resource.Group, e.Resource.Version, e.Resource.Resource)
		md["namespace"], md["name"] = e.Namespace, e.Name
		return withDetails(codes.Internal, e.Error()+"; this is a bug of the hub: report it. Resuming meets the object again until it changes",
			errorInfo(ReasonObjectUnsendable, md))
	}),
	whenAs(resourceStatus),
	whenIs(informerhub.ErrUnavailable, func(log *slog.Logger, err error) error {
		log.Warn("unavailable", "error", err)
		return withDetails(codes.Unavailable, "the hub cannot reach the Kubernetes API server right now; retry with backoff",
			errorInfo(ReasonUpstreamUnavailable, nil))
	}),
}

// whenIs is the rule of the errors that match target with errors.Is.
func whenIs(target error, st func(log *slog.Logger, err error) error) statusRule {
	return func(log *slog.Logger, err error) (error, bool) {
		if !errors.Is(err, target) {
			return nil, false
		}
		return st(log, err), true
	}
}

// whenAs is the rule of the errors that hold an E, found with errors.As.
func whenAs[E error](st func(log *slog.Logger, e E, err error) error) statusRule {
	return func(log *slog.Logger, err error) (error, bool) {
		var e E
		if !errors.As(err, &e) {
			return nil, false
		}
		return st(log, e, err), true
	}
}

func canceledStatus(*slog.Logger, error) error {
	return status.Error(codes.Canceled, "the client canceled the call")
}

func forbiddenStatus(_ *slog.Logger, forbidden *auth.ForbiddenError, err error) error {
	a := forbidden.Attributes
	md := resourceMetadata(a.Resource.Group, a.Resource.Version, a.Resource.Resource)
	md["user"], md["verb"], md["namespace"] = forbidden.User, a.Verb, a.Namespace
	msg := forbidden.Error() + ": its Kubernetes RBAC does not allow it"
	switch lost := lostAccess(err); {
	case lost != nil && lost.resumeToken == "": // a Count
		msg = forbidden.Error() + " any more: call again once access is granted again"
	case lost != nil:
		md["resume_token"] = lost.resumeToken
		msg = forbidden.Error() + " any more: watch again from the resume token once access is granted again"
	}
	return withDetails(codes.PermissionDenied, msg, errorInfo(ReasonForbidden, md))
}

func unauthenticatedStatus(_ *slog.Logger, err error) error {
	md := map[string]string{}
	msg := err.Error()
	switch lost := lostAccess(err); {
	case lost != nil && lost.resumeToken == "": // a Count
		msg += ": the credentials that opened this stream are no longer accepted; call again with valid ones"
	case lost != nil:
		md["resume_token"] = lost.resumeToken
		msg += ": the credentials that opened this stream are no longer accepted; watch again from the resume token with valid ones"
	}
	return withDetails(codes.Unauthenticated, msg, errorInfo(ReasonUnauthenticated, md))
}

func authUnavailableStatus(log *slog.Logger, _ *authUnavailableError, err error) error {
	// The cause (the API server, the hub's own permissions) stays in the
	// log.
	log.Warn("cannot check a caller's access", "error", err)
	md := map[string]string{}
	msg := "the hub cannot check your access with the Kubernetes API server right now; retry with backoff"
	switch lost := lostAccess(err); {
	case lost != nil && lost.resumeToken == "": // a Count
		msg = "the hub has not been able to confirm your access with the Kubernetes API server for a while; call again, with backoff"
	case lost != nil:
		md["resume_token"] = lost.resumeToken
		msg = "the hub has not been able to confirm your access with the Kubernetes API server for a while; watch again from the resume token, with backoff"
	}
	return withDetails(codes.Unavailable, msg, errorInfo(ReasonUpstreamUnavailable, md))
}

// lostAccess returns the accessLostError that err holds, if any: a running
// stream's, whose client resumes from its token.
func lostAccess(err error) *accessLostError {
	var lost *accessLostError
	if errors.As(err, &lost) {
		return lost
	}
	return nil
}

func tooManySubscriptionsStatus(_ *slog.Logger, e *auth.TooManySubscriptionsError, _ error) error {
	md := map[string]string{"user": e.User, "limit": strconv.Itoa(e.Max)}
	if e.User == "" {
		md = map[string]string{"scope": "replica", "limit": strconv.Itoa(e.Max)}
	}
	return withDetails(codes.ResourceExhausted, e.Error(), errorInfo(ReasonTooManySubscriptions, md))
}

func limitStatus(_ *slog.Logger, e *informerhub.LimitError, _ error) error {
	md := resourceMetadata(e.Resource.Group, e.Resource.Version, e.Resource.Resource)
	md["limit"], md["max"] = e.Limit, strconv.Itoa(e.Max)
	reason := ReasonTooManyDistinct
	switch e.Limit {
	case informerhub.LimitReplayState:
		reason = ReasonReplayLimit
	case informerhub.LimitMemoryBudget:
		reason = ReasonSubscriberTooSlow // of a snapshot or initial events
	case informerhub.LimitCountGroups, informerhub.LimitCountGroupBytes:
		reason = ReasonTooManyGroups
	}
	return withDetails(codes.ResourceExhausted, e.Error(), errorInfo(reason, md))
}

func requestStatus(_ *slog.Logger, e *informerhub.RequestError, err error) error {
	reason := ReasonInvalidArgument
	if errors.Is(err, informerhub.ErrInvalidToken) {
		reason = ReasonInvalidResumeToken
	}
	return withDetails(codes.InvalidArgument, e.Error(),
		errorInfo(reason, map[string]string{"field": e.Field}),
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: e.Field, Description: e.Reason}}})
}

func tooSlowStatus(_ *slog.Logger, e *informerhub.TooSlowError, _ error) error {
	md := resourceMetadata(e.Resource.Group, e.Resource.Version, e.Resource.Resource)
	if !e.Counting { // counts have no token
		md["resume_token"] = e.ResumeToken
	}
	return withDetails(codes.ResourceExhausted, e.Error(), errorInfo(ReasonSubscriberTooSlow, md))
}

func shuttingDownStatus(_ *slog.Logger, err error) error {
	var md map[string]string
	msg := "the hub is shutting down: reconnect, to this or another replica, with your last resume token"
	var drained *drainedError
	switch {
	case errors.As(err, &drained) && drained.resumeToken != "":
		md = map[string]string{"resume_token": drained.resumeToken}
	case drained != nil: // a Count, which has no token
		msg = "the hub is shutting down: call again, on this or another replica"
	}
	return withDetails(codes.Unavailable, msg, errorInfo(ReasonShuttingDown, md))
}

func resourceStatus(log *slog.Logger, e *informerhub.ResourceError, err error) error {
	r := e.Resource
	md := resourceMetadata(r.Group, r.Version, r.Resource)
	switch {
	case errors.Is(err, informerhub.ErrUnknownResource):
		return withDetails(codes.NotFound, e.Error(), errorInfo(ReasonResourceNotFound, md))
	case errors.Is(err, informerhub.ErrTokenAhead):
		return withDetails(codes.Unavailable, e.Error(), errorInfo(ReasonResumeTokenAhead, md))
	case errors.Is(err, informerhub.ErrUnavailable):
		// The cause (API server addresses, the hub's identity) stays in
		// the log; the client gets its Kubernetes reason.
		log.Warn("resource unavailable", "resource", r.String(), "error", err)
		if reason := apierrors.ReasonForError(err); reason != metav1.StatusReasonUnknown {
			md["kubernetes_reason"] = string(reason)
		}
		what := r.Resource
		if what == "" { // discovery of the group version failed
			what = "resources of " + r.GroupVersion().String()
		}
		var upstreamLost *upstreamLostError
		if errors.As(err, &upstreamLost) {
			md["resume_token"] = upstreamLost.resumeToken
		}
		return withDetails(codes.Unavailable, "the hub cannot serve "+what+" from the Kubernetes API server right now; retry with backoff",
			errorInfo(ReasonUpstreamUnavailable, md))
	}
	return internal(log, err)
}

// internal is the status of an error the hub did not expect: its text
// stays in the log.
func internal(log *slog.Logger, err error) error {
	log.Error("internal error", "error", err)
	return status.Error(codes.Internal, "internal error")
}

func errorInfo(reason string, md map[string]string) *errdetails.ErrorInfo {
	return &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: md}
}

func resourceMetadata(group, version, resource string) map[string]string {
	return map[string]string{"group": group, "version": version, "resource": resource}
}

// withMetadata returns st with key set to value in its ErrorInfo's
// metadata; a status without ErrorInfo (gRPC's own, an internal error) as
// it is.
func withMetadata(st error, key, value string) error {
	converted, ok := status.FromError(st)
	if !ok {
		return st
	}
	details := converted.Details()
	withValue := make([]protoadapt.MessageV1, 0, len(details))
	found := false
	for _, d := range details {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			if info.Metadata == nil {
				info.Metadata = map[string]string{}
			}
			info.Metadata[key] = value
			found = true
		}
		if m, ok := d.(protoadapt.MessageV1); ok {
			withValue = append(withValue, m)
		}
	}
	if !found {
		return st
	}
	return withDetails(converted.Code(), converted.Message(), withValue...)
}

func withDetails(code codes.Code, msg string, details ...protoadapt.MessageV1) error {
	st, err := status.New(code, msg).WithDetails(details...)
	if err != nil {
		return status.Error(code, msg)
	}
	return st.Err()
}
