package informerhub

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"

	"github.com/informerhub/informerhub/informerhub/upstream"
)

// retain keeps the informer of one resource type of Config.Retain running
// for the hub's life: it holds a reference on its feed, so the feed never
// stops for idleness, and starts a new one when the feed stops (its API
// server failed for too long, its CRD went away), until the hub closes.
func retain(h *Hub, name string) {
	log := h.log.With("retain", name)
	backoff := time.Second
	wait := func() bool {
		t := time.NewTimer(backoff)
		defer t.Stop()
		backoff = min(2*backoff, time.Minute)
		select {
		case <-t.C:
			return true
		case <-h.ctx.Done():
			return false
		}
	}
	for {
		info, err := resolveName(h.ctx, h, name)
		if err != nil {
			if h.ctx.Err() != nil {
				return
			}
			log.Warn("cannot resolve a resource type to retain; retrying", "error", err)
			if !wait() {
				return
			}
			continue
		}
		e, err := h.feeds.Take(info)
		if err != nil {
			return // closed
		}
		h.feeds.Retain(e, 1)
		log.Info("retaining the resource type's history", "resource", upstream.FormatResource(info.Resource))
		f := e.Feed()
		select {
		case <-f.Synced():
			backoff = time.Second
		case <-f.Stopped():
		case <-h.ctx.Done():
		}
		select {
		case <-f.Stopped():
		case <-h.ctx.Done():
		}
		h.feeds.Retain(e, -1)
		h.feeds.Release(e)
		if h.ctx.Err() != nil || !wait() {
			return
		}
	}
}

// resolveName resolves a resource type named as Config.Retain names them:
// "resource[.group]", at the highest version the cluster serves, or
// "resource.version[.group]".
func resolveName(ctx context.Context, h *Hub, name string) (upstream.ResourceInfo, error) {
	infos, err := h.resources(ctx)
	if err != nil {
		return upstream.ResourceInfo{}, err
	}
	resource, rest, _ := strings.Cut(name, ".")
	var best *upstream.ResourceInfo
	for i := range infos {
		gvr := infos[i].Resource
		if gvr.Resource != resource {
			continue
		}
		exact := gvr.Group == rest || // resource.group, or resource alone
			gvr.Version == rest && gvr.Group == "" || // resource.version
			rest == gvr.Version+"."+gvr.Group // resource.version.group
		if !exact {
			continue
		}
		if best == nil || version.CompareKubeAwareVersionStrings(gvr.Version, best.Resource.Version) > 0 {
			best = &infos[i]
		}
	}
	if best == nil {
		return upstream.ResourceInfo{}, &ResourceError{Resource: schema.GroupVersionResource{Resource: name},
			Err: fmt.Errorf("%w: the cluster serves no resource type %q that can be watched", ErrUnknownResource, name)}
	}
	return *best, nil
}
