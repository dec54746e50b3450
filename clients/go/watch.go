package hubclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// WatchOptions says where a Watch starts, and what its events carry.
type WatchOptions struct {
	// ResumeToken continues right after the event that carried it (from
	// this or an earlier watch, or a snapshot). Empty starts from now.
	ResumeToken string
	// SendInitialEvents first delivers every matching object as ADDED (as
	// of ResumeToken, or now), then a bookmark with InitialEventsEnd.
	SendInitialEvents bool
	// Fields projects objects: the paths of the object to keep, such as
	// "status.phase" or "metadata.labels"; empty keeps everything.
	// apiVersion, kind, and metadata name, namespace, uid and
	// resourceVersion are always kept. Names are separated by dots; a name
	// that holds a dot is written in brackets and quotes
	// (metadata.labels["app.kubernetes.io/name"]); through a list a path
	// applies to every element ("spec.containers.image"). A change that
	// changes none of these paths is not delivered: the watch's position
	// moves on with the next event.
	Fields []string
	// IncludePrevious sets Event.Previous on MODIFIED events: the object's
	// state before the change, projected like Object.
	IncludePrevious bool
}

// Watcher delivers the events of one watch, without gaps: it reconnects on
// its own, with exponential backoff and jitter, moving to another hub
// replica when one fails, and resumes from the token of the last event it
// delivered, so nothing is lost or repeated.
//
// When the hub can no longer resume (OUT_OF_RANGE: the API server compacted
// the token's resourceVersion away), the watcher re-syncs: it lists every
// matching object again, with the same selector (filter included) and
// fields, and delivers only the real differences from what it had
// delivered, each marked Resync, then a bookmark with Resync set: DELETED
// for an object that is gone or no longer matches, ADDED for one that is
// new or matches now, MODIFIED for one that changed. Changed means a new
// resourceVersion; with Fields, a change of what the caller was sent (the
// projected object, resourceVersion aside unless Fields ask for it), as the
// hub itself delivers only those. With IncludePrevious, a MODIFIED of a
// re-sync carries as Previous the state the watch delivered last, and a
// DELETED that state whole. A watch that started from a ResumeToken does
// not know what its caller holds from before, so its re-sync instead lists
// every object as ADDED with ResyncReplaces set: the caller drops what it
// holds that was not listed.
//
// To compute re-syncs, the watcher remembers each object it delivered that
// still exists for the caller: its identity (apiVersion, kind, name,
// namespace, uid and resourceVersion, about 200 bytes); with Fields, a
// 32-byte digest of what the caller was sent; and with IncludePrevious, the
// whole JSON it delivered last (as much memory as the caller's own copy of
// the objects, projected). Its memory grows with the number of objects it
// follows.
//
// Errors that retrying cannot fix end the watch: INVALID_ARGUMENT (a
// filter that does not compile, a field the resource type cannot be
// selected by, a path in Fields that cannot be valid), NOT_FOUND,
// PERMISSION_DENIED, UNAUTHENTICATED and UNIMPLEMENTED, returned by Next as
// gRPC status errors; so do the end of its context and ErrClientClosed.
// The exception: a running stream that the hub ends because the
// credentials it opened with expired is reopened, with the token source's
// current credentials; only if those are refused does the watch end.
// RESOURCE_EXHAUSTED is retried after a backoff, whatever its reason: this
// client read too slowly or called too often, or too many distinct filters
// or projections are in use on the resource type (TOO_MANY_DISTINCT: the
// watch opens once some of them are gone).
//
// A Watcher is for one goroutine; Close may be called from any.
type Watcher struct {
	client *Client
	sel    Selector
	opts   WatchOptions
	ctx    context.Context
	cancel context.CancelFunc

	stream       grpc.ServerStreamingClient[informerhubv1.WatchResponse]
	streamCancel context.CancelFunc
	endpoint     int // the replica the stream is on

	token          string // of the last event delivered, or the start
	tokenFromHub   bool   // token came from the hub (so it covers SendInitialEvents)
	initialPending bool   // initial events were asked for and have not ended
	reconnection          // its failures, the backoff, and their logging
	err            error  // the end of the watch, once it ended

	// seen is what the watch has delivered: every object that exists for
	// the caller, by namespace and name. Re-syncs diff against it, if it is
	// all the caller holds (knowsAll): not so for a watch that started from
	// a token, until its first re-sync.
	seen     map[objectKey]delivered
	knowsAll bool
	// byContent: with Fields, re-syncs compare what the caller was sent
	// rather than resourceVersions (keepRV: with the resourceVersion, when
	// Fields ask for it).
	byContent, keepRV bool
	// During a re-sync: the objects listed so far, and the token to resume
	// the listing from if its stream breaks.
	resync      map[objectKey]initialObject
	resyncToken string
	pending     []Event // events a re-sync computed, not yet delivered
}

type objectKey struct{ namespace, name string }

// identity is what a watch remembers of an object it delivered.
type identity struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name            string `json:"name"`
		Namespace       string `json:"namespace,omitempty"`
		UID             string `json:"uid"`
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
}

func (id identity) key() objectKey { return objectKey{id.Metadata.Namespace, id.Metadata.Name} }

// delivered is what a watch remembers of the last state of an object it
// delivered: its identity, and what a re-sync needs to compare it and to
// report Previous (see Watcher).
type delivered struct {
	id     identity
	sum    [sha256.Size]byte // with Fields: contentSum of the object delivered
	object string            // with IncludePrevious: the object delivered
}

type initialObject struct {
	id    identity
	event Event
}

// identityOf reads an object's metadata and stops there: the rest of the
// object, most of its bytes, is not scanned (the hub sends each object as
// the API server wrote it, already checked). json.Unmarshal of the whole
// object was about a third of a Go client's CPU per event (BENCHMARKS.md,
// Export; issue 42).
func identityOf(object []byte) (identity, error) {
	var id identity
	dec := json.NewDecoder(bytes.NewReader(object))
	if t, err := dec.Token(); err != nil {
		return id, err
	} else if t != json.Delim('{') {
		return id, errors.New("the object is not a JSON object")
	}
	// The API server writes kind, apiVersion and metadata first.
	var kind, apiVersion, metadata bool
	for dec.More() && !(kind && apiVersion && metadata) {
		key, err := dec.Token()
		if err != nil {
			return id, err
		}
		switch key {
		case "kind":
			kind, err = true, dec.Decode(&id.Kind)
		case "apiVersion":
			apiVersion, err = true, dec.Decode(&id.APIVersion)
		case "metadata":
			metadata, err = true, dec.Decode(&id.Metadata)
		default:
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return id, err
		}
	}
	if !(kind && apiVersion && metadata) {
		// Read to the end, as json.Unmarshal would have: the object
		// was short of what it is expected to hold.
		if _, err := dec.Token(); err != nil {
			return id, err
		}
	}
	return id, nil
}

// Watch starts a watch. It connects on the first call to Next; read events
// with Next until it returns an error, and Close it when done. Cancelling ctx
// ends the watch too.
func (c *Client) Watch(ctx context.Context, sel Selector, opts WatchOptions) *Watcher {
	ctx, cancel := context.WithCancel(ctx)
	opts.Fields = slices.Clone(opts.Fields)
	return &Watcher{
		client: c, sel: sel, opts: opts, ctx: ctx, cancel: cancel, reconnection: reconnection{client: c},
		token:          opts.ResumeToken,
		initialPending: opts.SendInitialEvents,
		seen:           map[objectKey]delivered{},
		knowsAll:       opts.ResumeToken == "",
		byContent:      len(opts.Fields) > 0,
		keepRV:         asksForResourceVersion(opts.Fields),
	}
}

// Close ends the watch; Next then returns context.Canceled.
func (w *Watcher) Close() { w.cancel() }

// ResumeToken returns the token of the last event Next returned (or the one
// the watch started from): a new watch from it continues exactly here.
func (w *Watcher) ResumeToken() string { return w.token }

// Next returns the next event. It blocks until there is one, reconnecting
// as often as needed, and returns an error only when the watch has ended:
// its context ended, it was closed, or the hub refused it for good.
func (w *Watcher) Next() (Event, error) {
	for {
		if w.err == nil && w.ctx.Err() != nil {
			w.err = w.ctx.Err()
		}
		if w.err != nil {
			return Event{}, w.err
		}
		if len(w.pending) > 0 {
			e := w.pending[0]
			w.pending = w.pending[1:]
			w.deliver(e)
			return e, nil
		}
		if w.stream == nil {
			w.connect()
			continue
		}
		resp, err := w.stream.Recv()
		if err != nil {
			w.streamFailed(err)
			continue
		}
		if !w.delivered { // a check first: the logger is made only when needed
			w.responded(w.log())
		}
		e := eventOf(resp)
		if w.resync != nil {
			w.collect(e)
			continue
		}
		w.deliver(e)
		return e, nil
	}
}

// deliver records e as delivered to the caller.
func (w *Watcher) deliver(e Event) {
	if e.ResumeToken != "" {
		w.token, w.tokenFromHub = e.ResumeToken, true
	}
	if e.InitialEventsEnd {
		w.initialPending = false
	}
	if e.Object == nil {
		return
	}
	id, err := identityOf(e.Object)
	if err != nil {
		return // not an object the hub sends; nothing to remember
	}
	if e.Type == Deleted {
		delete(w.seen, id.key())
		return
	}
	d := delivered{id: id}
	if w.byContent {
		d.sum = contentSum(e.Object, w.keepRV)
	}
	if w.opts.IncludePrevious {
		d.object = string(e.Object) // a copy: the caller may modify e.Object
	}
	w.seen[id.key()] = d
}

// log is the client's logger, with the watch's resource and namespace.
func (w *Watcher) log() *slog.Logger {
	return w.client.cfg.log.With("resource", w.sel.Resource.String(), "namespace", w.sel.Namespace)
}

// connect opens a stream, after the backoff its failures call for.
func (w *Watcher) connect() {
	svc, endpoint, err := w.attempt(w.ctx, w.log())
	switch {
	case err != nil:
		w.err = err
		return
	case svc == nil:
		return
	}
	req := &informerhubv1.WatchRequest{Selector: w.sel.proto(), ResumeToken: w.token,
		Fields: w.opts.Fields, IncludePrevious: w.opts.IncludePrevious}
	switch {
	case w.resync != nil:
		// List again, or go on listing from where the last stream broke.
		req.ResumeToken, req.SendInitialEvents = w.resyncToken, w.resyncToken == ""
	case !w.tokenFromHub:
		// Until the hub has issued a token, ask for what the caller asked;
		// the hub's tokens carry the initial events' progress themselves.
		req.SendInitialEvents = w.opts.SendInitialEvents
	}
	ctx, cancel := context.WithCancel(w.ctx)
	stream, err := svc.Watch(ctx, req)
	if err != nil {
		cancel()
		w.endpoint = endpoint
		w.streamFailed(err)
		return
	}
	w.stream, w.streamCancel, w.endpoint = stream, cancel, endpoint
	// The hub sends the headers once the stream is established, before
	// any event: a watch that is quiet then has reconnected too.
	md, err := stream.Header()
	if err != nil || md == nil {
		return // the stream ended; Recv says why
	}
	w.established(w.log())
	if !w.tokenFromHub && w.resync == nil {
		// The headers carry the token of the stream's start, so that a
		// reconnection before the first event loses nothing.
		if tokens := md.Get("resume-token"); len(tokens) > 0 && tokens[0] != "" {
			w.token, w.tokenFromHub = tokens[0], true
		}
	}
}

// streamFailed decides what an error of the stream means for the watch.
func (w *Watcher) streamFailed(err error) {
	if w.streamCancel != nil {
		w.streamCancel()
	}
	w.stream, w.streamCancel = nil, nil
	if w.ctx.Err() != nil {
		w.err = w.ctx.Err()
		return
	}
	if errors.Is(err, io.EOF) {
		err = status.Error(codes.Unavailable, "the hub ended the stream")
	}
	switch recoveryOf(err) {
	case resync:
		// The token expired: list again and report the differences.
		w.log().Info("the hub can no longer resume this watch; re-syncing", "error", err)
		w.resync, w.resyncToken = map[objectKey]initialObject{}, ""
		w.up, w.failures, w.wait = false, 0, 0
	case fail:
		w.err = err
	default:
		w.failed(err, w.endpoint, w.log())
	}
}

// recovery is what a watch does about the error that ended its stream.
type recovery int

const (
	reconnect recovery = iota // from its last token, after a backoff
	resync                    // the hub can no longer resume it (OUT_OF_RANGE)
	fail                      // retrying cannot help: the watch ends
)

// recoveryOf says what a watch does about the error that ended its stream
// (see Watcher).
func recoveryOf(err error) recovery {
	switch status.Code(err) {
	case codes.OutOfRange:
		return resync
	case codes.Unauthenticated:
		if !endedMidStream(err) {
			return fail
		}
		// The credentials that opened the stream expired while it ran:
		// reconnect, with the token source's current ones. If those are
		// refused too, the watch ends.
		return reconnect
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unimplemented:
		return fail
	case codes.Internal:
		if hasReason(err, "OBJECT_UNSENDABLE") {
			// The hub cannot send an object as this watch asks, and every
			// replica meets it again on resuming: retrying would loop.
			return fail
		}
	}
	return reconnect
}

// endedMidStream tells whether the hub ended a running stream with err (its
// ErrorInfo then carries the token to resume from), rather than refused to
// open it.
func endedMidStream(err error) bool {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetMetadata()["resume_token"] != "" {
			return true
		}
	}
	return false
}

// collect gathers the objects of a re-sync; at their end it computes the
// differences from what was delivered.
func (w *Watcher) collect(e Event) {
	if e.Type == Added && e.Object != nil {
		id, err := identityOf(e.Object)
		if err == nil {
			w.resync[id.key()] = initialObject{id: id, event: e}
		}
		w.resyncToken = e.ResumeToken
		return
	}
	if !e.InitialEventsEnd {
		return
	}
	// Until the re-sync is complete, its events carry the last token from
	// before it: a caller that stops halfway re-syncs again.
	before, replaces := w.token, !w.knowsAll
	// ADDED and MODIFIED carry the listed object's resourceVersion, a
	// DELETED the listing's: when the hub found the object gone.
	mark := func(t EventType, object []byte, rv string) Event {
		return Event{Type: t, Object: object, ResourceVersion: rv, ResumeToken: before, Resync: true, ResyncReplaces: replaces}
	}
	// Previous and a DELETED's object: the last state delivered, if the
	// watch kept it (IncludePrevious).
	last := func(old delivered) []byte {
		if old.object == "" {
			return nil
		}
		return []byte(old.object)
	}
	var diff []Event
	if replaces {
		// What the caller holds is unknown: list it all.
		for _, key := range sortedKeys(w.resync) {
			listed := w.resync[key]
			diff = append(diff, mark(Added, listed.event.Object, listed.id.Metadata.ResourceVersion))
		}
		clear(w.seen)
	} else {
		for _, key := range sortedKeys(w.seen) {
			old := w.seen[key]
			now, exists := w.resync[key]
			if !exists || now.id.Metadata.UID != old.id.Metadata.UID {
				tombstone := last(old)
				if tombstone == nil {
					tombstone, _ = json.Marshal(old.id)
				}
				diff = append(diff, mark(Deleted, tombstone, e.ResourceVersion))
			}
		}
		for _, key := range sortedKeys(w.resync) {
			now := w.resync[key]
			old, existed := w.seen[key]
			switch {
			case !existed || old.id.Metadata.UID != now.id.Metadata.UID:
				diff = append(diff, mark(Added, now.event.Object, now.id.Metadata.ResourceVersion))
			case w.changed(old, now):
				modified := mark(Modified, now.event.Object, now.id.Metadata.ResourceVersion)
				modified.Previous = last(old)
				diff = append(diff, modified)
			}
		}
	}
	w.client.cfg.log.Info("re-synced", "resource", w.sel.Resource.String(), "events", len(diff), "listedAll", replaces)
	w.pending = append(diff, Event{Type: Bookmark, ResourceVersion: e.ResourceVersion, ResumeToken: e.ResumeToken,
		Resync: true, ResyncReplaces: replaces, InitialEventsEnd: w.initialPending})
	w.resync, w.resyncToken, w.knowsAll = nil, "", true
}

// changed tells whether a listed object differs from what the watch
// delivered of it, as the hub decides whether to send a MODIFIED: by
// resourceVersion, or, with a projection, by what the caller was sent.
func (w *Watcher) changed(old delivered, now initialObject) bool {
	if w.byContent {
		return contentSum(now.event.Object, w.keepRV) != old.sum
	}
	return old.id.Metadata.ResourceVersion != now.id.Metadata.ResourceVersion
}

// contentSum digests an object's JSON in canonical form (keys sorted,
// numbers as written), without its metadata.resourceVersion unless keepRV:
// the projection of an object whose only change was to fields it leaves out
// differs from before in its resourceVersion alone, and the hub did not send
// that change.
func contentSum(object []byte, keepRV bool) [sha256.Size]byte {
	dec := json.NewDecoder(bytes.NewReader(object))
	dec.UseNumber()
	var v map[string]any
	if err := dec.Decode(&v); err != nil {
		return sha256.Sum256(object) // not an object the hub sends
	}
	if m, ok := v["metadata"].(map[string]any); ok && !keepRV {
		delete(m, "resourceVersion")
	}
	canonical, err := json.Marshal(v)
	if err != nil {
		return sha256.Sum256(object)
	}
	return sha256.Sum256(canonical)
}

func sortedKeys[V any](m map[objectKey]V) []objectKey {
	keys := make([]objectKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b objectKey) int {
		if c := strings.Compare(a.namespace, b.namespace); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	return keys
}

// hasReason tells whether err's google.rpc.ErrorInfo has that reason.
func hasReason(err error, reason string) bool {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == reason {
			return true
		}
	}
	return false
}
