package hubclient

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
)

// verifySettle is how long VerifyCache gives a store to catch up with what
// the ListerWatcher delivered: an informer applies each event after the
// reflector received it, through its queue.
const verifySettle = time.Second

// CacheReport is what VerifyCache found.
type CacheReport struct {
	// ResourceVersion is the hub's position the store was compared with.
	ResourceVersion string
	// Count and Digest describe the hub's selection there; the store's are
	// the same when Differences is empty.
	Count  uint64
	Digest string
	// Differences are the objects the store holds otherwise than the hub,
	// ordered by namespace and name: missing, extra, or at another
	// version. Empty when the store is the hub's state.
	Differences []CacheDifference
}

// Consistent reports whether the store held exactly the hub's selection.
func (r *CacheReport) Consistent() bool { return len(r.Differences) == 0 }

// CacheDifference is an object a store holds otherwise than the hub. An
// empty UID means the side does not hold the object at all.
type CacheDifference struct {
	Namespace, Name                string
	StoreUID, StoreResourceVersion string
	HubUID, HubResourceVersion     string
}

func (d CacheDifference) String() string {
	key := d.Name
	if d.Namespace != "" {
		key = d.Namespace + "/" + d.Name
	}
	switch {
	case d.StoreUID == "":
		return fmt.Sprintf("%s: missing from the store (the hub has uid %s, resourceVersion %s)", key, d.HubUID, d.HubResourceVersion)
	case d.HubUID == "":
		return fmt.Sprintf("%s: in the store (uid %s, resourceVersion %s), not at the hub", key, d.StoreUID, d.StoreResourceVersion)
	}
	return fmt.Sprintf("%s: the store has uid %s at resourceVersion %s, the hub uid %s at %s",
		key, d.StoreUID, d.StoreResourceVersion, d.HubUID, d.HubResourceVersion)
}

// VerifyCache checks store, the store of the informer that runs on lw
// (informer.GetStore()), against the hub: that it holds exactly the
// objects the hub's selection holds, each at the same uid and
// resourceVersion. It compares the store's Digest with the hub's at the
// position lw delivered last; that costs one Digest call and one pass over
// the store, and is retried for up to a second while the store catches up
// (an informer applies what the reflector received through its queue).
// Only when they never match does it list the selection from the hub (a
// Snapshot) to name the objects that differ, and report an object only if
// the store still holds it at the same version in a second Snapshot a
// second later while the hub holds another: a store merely behind has
// moved on by then, and an object that changed meanwhile is held newer
// than the snapshot. A store that does not apply an object's change for a
// whole second is reported as differing there.
//
// The informer must have listed (synced): VerifyCache checks the selection
// it listed, with the selectors its ListOptions added. Where the hub keeps
// the store's position no longer, the store is compared with the hub's
// current state.
func (lw *ListerWatcher) VerifyCache(ctx context.Context, store cache.Store) (*CacheReport, error) {
	lw.mu.Lock()
	sel, listed := lw.listed, lw.hasListed
	lw.mu.Unlock()
	if !listed {
		return nil, errors.New("hubclient: VerifyCache: the informer has not listed yet; wait for it to sync")
	}
	if report, matched, err := lw.compareDigests(ctx, sel, store); matched || err != nil {
		return report, err
	}
	return lw.compareObjects(ctx, sel, store)
}

// compareDigests compares the store's digest with the hub's at the
// position lw delivered, until they match or verifySettle passes; it
// reports whether they matched.
func (lw *ListerWatcher) compareDigests(ctx context.Context, sel Selector, store cache.Store) (*CacheReport, bool, error) {
	var hub *DigestResult
	var hubAt string // the token hub answered for
	deadline := time.Now().Add(verifySettle)
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		at := lw.deliveredToken()
		local, err := storeDigest(store)
		if err != nil {
			return nil, false, err
		}
		// An event delivered while the store was read may be in it or
		// not: read it again rather than compare with either position.
		if lw.deliveredToken() == at {
			// A moved answer is of the hub's position now, which the
			// store may reach: ask again each time.
			if hub == nil || hubAt != at || hub.Moved {
				if hub, err = lw.client.Digest(ctx, sel, at); err != nil {
					return nil, false, err
				}
				hubAt = at
			}
			// A match proves the store is the hub's state at the
			// position answered, the asked one or, moved, the current.
			if local.Matches(hub) {
				return &CacheReport{ResourceVersion: hub.ResourceVersion, Count: hub.Count, Digest: hub.Digest}, true, nil
			}
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, false, nil
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, false, err
		}
	}
}

// compareObjects compares the store with two snapshots of the hub a
// settling time apart, object by object, and reports the objects the
// store held at the same version both times while the hub held another:
// a store merely behind has moved on in between, and an object that
// changed meanwhile is held newer than the snapshot.
func (lw *ListerWatcher) compareObjects(ctx context.Context, sel Selector, store cache.Store) (*CacheReport, error) {
	var first map[objectKey]CacheDifference
	for round := 0; ; round++ {
		snap, err := lw.client.Snapshot(ctx, sel)
		if err != nil {
			return nil, err
		}
		hub, err := snapshotVersions(snap)
		if err != nil {
			return nil, err
		}
		held, err := storeVersions(store)
		if err != nil {
			return nil, err
		}
		differences := differencesBetween(held, hub, snap.ResourceVersion)
		report := &CacheReport{ResourceVersion: snap.ResourceVersion, Count: uint64(len(hub))}
		var d Digest
		for k, v := range hub {
			d.Add(k.namespace, k.name, v.uid, v.resourceVersion)
		}
		report.Digest = d.String()
		if len(differences) == 0 {
			return report, nil
		}
		if round > 0 {
			for _, diff := range differences {
				if before, ok := first[objectKey{diff.Namespace, diff.Name}]; ok && stillDiffers(before, diff) {
					report.Differences = append(report.Differences, diff)
				}
			}
			return report, nil
		}
		first = make(map[objectKey]CacheDifference, len(differences))
		for _, diff := range differences {
			first[objectKey{diff.Namespace, diff.Name}] = diff
		}
		if err := sleep(ctx, verifySettle); err != nil {
			return nil, err
		}
	}
}

// stillDiffers reports whether a difference found again a settling time
// later is one: the store held the object at the same version both times
// (a store behind moves on), and, where it held none, the hub held the
// same object both times (a name deleted and created again in between is
// a store behind twice).
func stillDiffers(before, now CacheDifference) bool {
	if before.StoreUID != now.StoreUID || before.StoreResourceVersion != now.StoreResourceVersion {
		return false
	}
	return now.StoreUID != "" || before.HubUID == now.HubUID
}

type objectVersion struct{ uid, resourceVersion string }

func storeVersions(store cache.Store) (map[objectKey]objectVersion, error) {
	objs := store.List()
	out := make(map[objectKey]objectVersion, len(objs))
	for _, obj := range objs {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, fmt.Errorf("hubclient: VerifyCache: the store holds a %T: %w", obj, err)
		}
		out[objectKey{m.GetNamespace(), m.GetName()}] = objectVersion{string(m.GetUID()), m.GetResourceVersion()}
	}
	return out, nil
}

func storeDigest(store cache.Store) (Digest, error) {
	var d Digest
	for _, obj := range store.List() {
		m, err := meta.Accessor(obj)
		if err != nil {
			return Digest{}, fmt.Errorf("hubclient: VerifyCache: the store holds a %T: %w", obj, err)
		}
		d.AddObject(m)
	}
	return d, nil
}

func snapshotVersions(snap *Snapshot) (map[objectKey]objectVersion, error) {
	out := make(map[objectKey]objectVersion, len(snap.Objects))
	for _, data := range snap.Objects {
		var id identity
		if err := json.Unmarshal(data, &id); err != nil {
			return nil, fmt.Errorf("hubclient: VerifyCache: decoding a snapshot's object: %w", err)
		}
		out[id.key()] = objectVersion{id.Metadata.UID, id.Metadata.ResourceVersion}
	}
	return out, nil
}

// differencesBetween lists the objects held otherwise than the hub holds
// them at resourceVersion, leaving out those the store holds at a later
// version: they changed after the snapshot.
func differencesBetween(held, hub map[objectKey]objectVersion, resourceVersion string) []CacheDifference {
	var out []CacheDifference
	add := func(k objectKey, s, h objectVersion) {
		if s == h || newer(s.resourceVersion, resourceVersion) {
			return
		}
		out = append(out, CacheDifference{Namespace: k.namespace, Name: k.name,
			StoreUID: s.uid, StoreResourceVersion: s.resourceVersion, HubUID: h.uid, HubResourceVersion: h.resourceVersion})
	}
	for k, s := range held {
		add(k, s, hub[k])
	}
	for k, h := range hub {
		if _, ok := held[k]; !ok {
			add(k, objectVersion{}, h)
		}
	}
	slices.SortFunc(out, func(a, b CacheDifference) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// newer reports whether resourceVersion a is after b. Kubernetes' are
// opaque, but the API server's are increasing integers, and an object
// version the hub holds is one of them; an unreadable one is not newer.
func newer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
