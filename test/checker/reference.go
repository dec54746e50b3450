package checker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// Reference is an independent record of every change of one resource type
// (optionally in one namespace), straight from the API server.
type Reference struct {
	namespace string
	start     uint64  // the resourceVersion of the initial LIST
	initial   []Event // the initial LIST, as ADDED events
	stop      func()  // ends the watch and waits for it to return

	mu       sync.Mutex    // guards the fields below
	changes  []Event       // every change after start, in order
	progress uint64        // every change up to this resourceVersion is recorded
	ended    bool          // the watch has returned
	err      error         // why the watch failed
	wake     chan struct{} // closed and replaced whenever the fields above change
}

// newReference returns a Reference of a LIST at start, which its owner
// (the watch, or a unit test) feeds with record and end.
func newReference(namespace string, start uint64, initial []Event) *Reference {
	return &Reference{namespace: namespace, start: start, initial: initial, stop: func() {},
		progress: start, wake: make(chan struct{})}
}

// StartReference LISTs (a consistent read, all pages) to get the state and
// its resourceVersion, then watches from that version with
// AllowWatchBookmarks, reopening the watch from the last version seen
// whenever it closes (API server restarts, timeouts). A 410 Gone or another
// error ends it, with Err. It records every change in order until ctx ends
// or Stop is called.
func StartReference(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, namespace string) (*Reference, error) {
	ri := client.Resource(gvr).Namespace(namespace)
	initial, listRV, err := list(ctx, ri, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("reference LIST of %s: %w", gvr.Resource, err)
	}
	start, err := parseRV(listRV)
	if err != nil {
		return nil, fmt.Errorf("reference LIST of %s: %w", gvr.Resource, err)
	}
	r := newReference(namespace, start, initial)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	r.stop = func() { cancel(); <-done }
	go func() {
		defer close(done)
		r.end(r.watch(ctx, ri))
	}()
	return r, nil
}

// list reads every page of a LIST, all at the resourceVersion of the first.
func list(ctx context.Context, ri dynamic.ResourceInterface, opts metav1.ListOptions) ([]Event, string, error) {
	opts.Limit = 500
	var events []Event
	for listRV := ""; ; {
		l, err := ri.List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		if listRV == "" {
			listRV = l.GetResourceVersion()
		}
		for i := range l.Items {
			e, err := fromObject(Added, &l.Items[i])
			if err != nil {
				return nil, "", err
			}
			events = append(events, e)
		}
		if l.GetContinue() == "" {
			return events, listRV, nil
		}
		// The continue token pins the version; the API server refuses a
		// version besides it.
		opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = l.GetContinue(), "", ""
	}
}

// watch records changes until ctx ends (nil) or the watch fails.
func (r *Reference) watch(ctx context.Context, ri dynamic.ResourceInterface) error {
	const minBackoff, maxBackoff = 50 * time.Millisecond, time.Second
	backoff := minBackoff
	for ctx.Err() == nil {
		r.mu.Lock()
		from := strconv.FormatUint(r.progress, 10)
		r.mu.Unlock()
		w, err := ri.Watch(ctx, metav1.ListOptions{ResourceVersion: from, AllowWatchBookmarks: true})
		if err != nil {
			if !retriable(err) {
				return err
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
		err = r.consume(ctx, w)
		w.Stop()
		if err != nil {
			return err
		}
	}
	return nil
}

// consume records the events of one watch until it closes (nil) or sends
// an error.
func (r *Reference) consume(ctx context.Context, w watch.Interface) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			e, err := FromAPIEvent(ev)
			if err == nil {
				err = r.record(e)
			}
			if err != nil {
				return err
			}
		}
	}
}

// retriable tells whether a watch that failed to open is worth opening
// again: the API server did not answer (it is restarting) or asked to come
// back later.
func retriable(err error) bool {
	var status apierrors.APIStatus
	return !errors.As(err, &status) || apierrors.IsServiceUnavailable(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsInternalError(err)
}

// record adds a change, or the progress a bookmark reports.
func (r *Reference) record(e Event) error {
	v := rv(e.ResourceVersion)
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Type != Bookmark {
		// Checking order here keeps a confused reference from blaming the hub.
		if v <= r.progress {
			return fmt.Errorf("reference got %s after resourceVersion %d", describe(e), r.progress)
		}
		r.changes = append(r.changes, e)
	}
	r.progress = max(r.progress, v)
	r.notifyLocked()
	return nil
}

// end marks the watch returned, with err if it failed.
func (r *Reference) end(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.err = fmt.Errorf("reference watch failed after resourceVersion %d: %w", r.progress, err)
	}
	r.ended = true
	r.notifyLocked()
}

func (r *Reference) notifyLocked() {
	close(r.wake)
	r.wake = make(chan struct{})
}

// ResourceVersion is the version of the reference's initial LIST: the
// reference knows the state at every version from it on.
func (r *Reference) ResourceVersion() string { return strconv.FormatUint(r.start, 10) }

// WaitFor blocks until the reference has recorded every change up to
// resourceVersion (it received an event or a bookmark at or past it), ctx
// ends, or the reference stops. The API server sends bookmarks about once a
// minute: waiting for a version past the last change in the reference's
// scope (say, a hub's bookmark) may take that long, unless a test writes
// something in scope.
func (r *Reference) WaitFor(ctx context.Context, resourceVersion string) error {
	v, err := parseRV(resourceVersion)
	if err != nil {
		return err
	}
	for {
		r.mu.Lock()
		progress, ended, err, wake := r.progress, r.ended, r.err, r.wake
		r.mu.Unlock()
		switch {
		case progress >= v:
			return nil
		case err != nil:
			return err
		case ended:
			return fmt.Errorf("reference stopped at resourceVersion %d, before %d", progress, v)
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the reference to reach resourceVersion %d (it is at %d): %w",
				v, progress, context.Cause(ctx))
		}
	}
}

// Changes returns every change recorded so far, in order.
func (r *Reference) Changes() []Event {
	changes, _ := r.history()
	return slices.Clone(changes)
}

func (r *Reference) history() (changes []Event, progress uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Appends never touch the elements a shorter slice holds.
	return r.changes[:len(r.changes):len(r.changes)], r.progress
}

// Err is why the reference's watch failed, if it did.
func (r *Reference) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Stop ends the watch, waits for its goroutine to return, and returns Err.
func (r *Reference) Stop() error {
	r.stop()
	return r.Err()
}

// stateAt returns every object at version v (at least r.start): the LIST
// with every change of changes up to v applied.
func (r *Reference) stateAt(changes []Event, v uint64) map[objKey]Event {
	state := make(map[objKey]Event, len(r.initial))
	for _, e := range r.initial {
		state[keyOf(e)] = e
	}
	for _, e := range changes {
		if rv(e.ResourceVersion) > v {
			break
		}
		apply(state, e)
	}
	return state
}

type objKey struct{ namespace, name string }

func keyOf(e Event) objKey { return objKey{e.Namespace, e.Name} }

func apply(state map[objKey]Event, e Event) {
	switch e.Type {
	case Added, Modified:
		state[keyOf(e)] = e
	case Deleted:
		delete(state, keyOf(e))
	}
}
