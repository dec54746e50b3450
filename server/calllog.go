package server

import (
	"context"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/informerhub/informerhub/informerhub/upstream"
)

// callLog is what a call's log line (go-grpc-middleware's logging, one
// line when the call finishes) says of it beyond the library's own fields:
// its protocol, and, as the call is admitted, its caller and what it
// selects. It rides in the call's fields as one value, which the logger
// spreads into fields of their own when it writes the line: adding them
// with logging.AddFields would copy every field at each addition and keep
// the copies for as long as the call runs (a stream's, hours; a replica
// holds 100,000), where this is set in place and formatted only once.
type callLog struct {
	protocol  string
	user      string
	resources []schema.GroupVersionResource
	namespace string
}

// callLogKey is the key of a call's callLog among its log fields.
const callLogKey = "call"

// callLogField is a call's callLog among its fields: a new one when the
// call starts, the same when its line is written
// (logging.WithFieldsFromContext, which is asked both times).
func callLogField(ctx context.Context) logging.Fields {
	cl := callLogIn(ctx)
	if cl == nil {
		cl = &callLog{protocol: protocolOf(ctx)}
	}
	return logging.Fields{callLogKey, cl}
}

// callLogOf returns the callLog of the call whose context is ctx; a
// throwaway one outside a logged call (a health check).
func callLogOf(ctx context.Context) *callLog {
	if cl := callLogIn(ctx); cl != nil {
		return cl
	}
	return &callLog{}
}

// callLogIn returns the callLog among the log fields of ctx, if any.
func callLogIn(ctx context.Context) *callLog {
	fields := logging.ExtractFields(ctx)
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == callLogKey {
			if cl, ok := fields[i+1].(*callLog); ok {
				return cl
			}
		}
	}
	return nil
}

// spreadCallLog replaces a callLog among a log line's fields with its own
// fields.
func spreadCallLog(fields []any) []any {
	for i := 0; i+1 < len(fields); i += 2 {
		cl, ok := fields[i+1].(*callLog)
		if !ok || fields[i] != callLogKey {
			continue
		}
		spread := append(fields[:i:i], "protocol", cl.protocol)
		if cl.user != "" {
			spread = append(spread, "user", cl.user)
		}
		switch len(cl.resources) {
		case 0:
		case 1:
			spread = append(spread, "resource", upstream.FormatResource(cl.resources[0]), "namespace", cl.namespace)
		default:
			names := ""
			for j, r := range cl.resources {
				if j > 0 {
					names += ","
				}
				names += upstream.FormatResource(r)
			}
			spread = append(spread, "resources", names)
		}
		return append(spread, fields[i+2:]...)
	}
	return fields
}
