package informerhub

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// ForgeToken makes a resume token at any position, for tests of the cases a
// client cannot produce on demand, such as tokens of other feed instances.
func ForgeToken(resource string, epoch, seq, rv uint64, offset uint32) string {
	return (&token{resource: resource, pos: position{epoch: epoch, seq: seq, rv: rv, offset: offset}}).encode()
}

// LiveSubscribers counts the live subscribers of a resource's feed.
func LiveSubscribers(h *Hub, gvr schema.GroupVersionResource) int {
	h.mu.Lock()
	f := h.feeds[gvr]
	h.mu.Unlock()
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs)
}

// PanicInProcess makes the informer handler of a resource's feed panic, as
// a bug in it would, and returns what the handler returned.
func PanicInProcess(h *Hub, gvr schema.GroupVersionResource) error {
	h.mu.Lock()
	f := h.feeds[gvr]
	h.mu.Unlock()
	return f.process(cache.Deltas{{Type: cache.Updated, Object: (*rawObject)(nil)}}, false)
}

// Replaying reports whether a subscription still reads its replay's
// upstream watch. Call it only between calls of Next.
func Replaying(s *Subscription) bool { return s.replay != nil }
