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
// handles differently.
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
)

// toStatus is the one place where the hub's errors become gRPC statuses.
// Messages say what to do; internal details stay in the logs.
func toStatus(log *slog.Logger, err error) error {
	var (
		reqErr         *informerhub.RequestError
		resourceErr    *informerhub.ResourceError
		expiredErr     *informerhub.ExpiredError
		tooSlowErr     *informerhub.TooSlowError
		forbidden      *auth.ForbiddenError
		lost           *accessLostError
		unavailable    *authUnavailableError
		tooManyReviews *auth.TooManyReviewsError
		drained        *drainedError
		upstreamLost   *upstreamLostError
		tooMany        *auth.TooManySubscriptionsError
		limitErr       *informerhub.LimitError
		panicked       *panicError
	)
	if _, ok := status.FromError(err); ok {
		// Already a status: gRPC's own (the client went away mid-send).
		return err
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, informerhub.ErrSubscriptionClosed):
		return status.Error(codes.Canceled, "the client canceled the call")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "the call's deadline passed")
	case errors.As(err, &forbidden):
		a := forbidden.Attributes
		md := resourceMetadata(a.Resource.Group, a.Resource.Version, a.Resource.Resource)
		md["user"], md["verb"], md["namespace"] = forbidden.User, a.Verb, a.Namespace
		msg := forbidden.Error() + ": its Kubernetes RBAC does not allow it"
		if errors.As(err, &lost) {
			md["resume_token"] = lost.resumeToken
			msg = forbidden.Error() + " any more: watch again from the resume token once access is granted again"
		}
		return withDetails(codes.PermissionDenied, msg, &errdetails.ErrorInfo{Reason: ReasonForbidden, Domain: ErrorDomain, Metadata: md})
	case errors.Is(err, auth.ErrUnauthenticated):
		md := map[string]string{}
		msg := err.Error()
		if errors.As(err, &lost) {
			md["resume_token"] = lost.resumeToken
			msg += ": the credentials that opened this stream are no longer accepted; watch again from the resume token with valid ones"
		}
		return withDetails(codes.Unauthenticated, msg, &errdetails.ErrorInfo{Reason: ReasonUnauthenticated, Domain: ErrorDomain, Metadata: md})
	case errors.As(err, &unavailable):
		// The cause (the API server, the hub's own permissions) stays in
		// the log.
		log.Warn("cannot check a caller's access", "error", err)
		md := map[string]string{}
		msg := "the hub cannot check your access with the Kubernetes API server right now; retry with backoff"
		if errors.As(err, &lost) {
			md["resume_token"] = lost.resumeToken
			msg = "the hub has not been able to confirm your access with the Kubernetes API server for a while; watch again from the resume token, with backoff"
		}
		return withDetails(codes.Unavailable, msg, &errdetails.ErrorInfo{Reason: ReasonUpstreamUnavailable, Domain: ErrorDomain, Metadata: md})
	case errors.As(err, &tooManyReviews):
		return withDetails(codes.ResourceExhausted, tooManyReviews.Error(),
			&errdetails.ErrorInfo{Reason: ReasonTooManyTokenReviews, Domain: ErrorDomain})
	case errors.As(err, &tooMany):
		md := map[string]string{"user": tooMany.User, "limit": strconv.Itoa(tooMany.Max)}
		if tooMany.User == "" {
			md = map[string]string{"scope": "replica", "limit": strconv.Itoa(tooMany.Max)}
		}
		return withDetails(codes.ResourceExhausted, tooMany.Error(),
			&errdetails.ErrorInfo{Reason: ReasonTooManySubscriptions, Domain: ErrorDomain, Metadata: md})
	case errors.As(err, &limitErr):
		md := resourceMetadata(limitErr.Resource.Group, limitErr.Resource.Version, limitErr.Resource.Resource)
		md["limit"], md["max"] = limitErr.Limit, strconv.Itoa(limitErr.Max)
		reason := ReasonTooManyDistinct
		if limitErr.Limit == informerhub.LimitReplayState {
			reason = ReasonReplayLimit
		}
		return withDetails(codes.ResourceExhausted, limitErr.Error(),
			&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: md})
	case errors.As(err, &panicked):
		log.Error("panic in a stream's sender", "error", err)
		return status.Error(codes.Internal, "internal error")
	case errors.As(err, &reqErr):
		reason := ReasonInvalidArgument
		if errors.Is(err, informerhub.ErrInvalidToken) {
			reason = ReasonInvalidResumeToken
		}
		return withDetails(codes.InvalidArgument, reqErr.Error(),
			&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: map[string]string{"field": reqErr.Field}},
			&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: reqErr.Field, Description: reqErr.Reason}}})
	case errors.As(err, &expiredErr):
		return withDetails(codes.OutOfRange, expiredErr.Error(),
			&errdetails.ErrorInfo{Reason: ReasonResumeTokenExpired, Domain: ErrorDomain, Metadata: resourceMetadata(expiredErr.Resource.Group, expiredErr.Resource.Version, expiredErr.Resource.Resource)})
	case errors.As(err, &tooSlowErr):
		md := resourceMetadata(tooSlowErr.Resource.Group, tooSlowErr.Resource.Version, tooSlowErr.Resource.Resource)
		md["resume_token"] = tooSlowErr.ResumeToken
		return withDetails(codes.ResourceExhausted, tooSlowErr.Error(),
			&errdetails.ErrorInfo{Reason: ReasonSubscriberTooSlow, Domain: ErrorDomain, Metadata: md})
	case errors.Is(err, informerhub.ErrClosed):
		var md map[string]string
		if errors.As(err, &drained) && drained.resumeToken != "" {
			md = map[string]string{"resume_token": drained.resumeToken}
		}
		return withDetails(codes.Unavailable, "the hub is shutting down: reconnect, to this or another replica, with your last resume token",
			&errdetails.ErrorInfo{Reason: ReasonShuttingDown, Domain: ErrorDomain, Metadata: md})
	case errors.As(err, &resourceErr):
		r := resourceErr.Resource
		md := resourceMetadata(r.Group, r.Version, r.Resource)
		switch {
		case errors.Is(err, informerhub.ErrUnknownResource):
			return withDetails(codes.NotFound, resourceErr.Error(),
				&errdetails.ErrorInfo{Reason: ReasonResourceNotFound, Domain: ErrorDomain, Metadata: md})
		case errors.Is(err, informerhub.ErrTokenAhead):
			return withDetails(codes.Unavailable, resourceErr.Error(),
				&errdetails.ErrorInfo{Reason: ReasonResumeTokenAhead, Domain: ErrorDomain, Metadata: md})
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
			if errors.As(err, &upstreamLost) {
				md["resume_token"] = upstreamLost.resumeToken
			}
			return withDetails(codes.Unavailable, "the hub cannot serve "+what+" from the Kubernetes API server right now; retry with backoff",
				&errdetails.ErrorInfo{Reason: ReasonUpstreamUnavailable, Domain: ErrorDomain, Metadata: md})
		}
	case errors.Is(err, informerhub.ErrUnavailable):
		log.Warn("unavailable", "error", err)
		return withDetails(codes.Unavailable, "the hub cannot reach the Kubernetes API server right now; retry with backoff",
			&errdetails.ErrorInfo{Reason: ReasonUpstreamUnavailable, Domain: ErrorDomain})
	}
	log.Error("internal error", "error", err)
	return status.Error(codes.Internal, "internal error")
}

func resourceMetadata(group, version, resource string) map[string]string {
	return map[string]string{"group": group, "version": version, "resource": resource}
}

func withDetails(code codes.Code, msg string, details ...protoadapt.MessageV1) error {
	st, err := status.New(code, msg).WithDetails(details...)
	if err != nil {
		return status.Error(code, msg)
	}
	return st.Err()
}
