package informerhub

import "k8s.io/apimachinery/pkg/runtime/schema"

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
