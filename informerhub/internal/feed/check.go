package feed

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/google/btree"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/informerhub/informerhub/informerhub/digest"
	"github.com/informerhub/informerhub/informerhub/internal/event"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

// The consistency check: as the kube-apiserver checks its watch cache
// against etcd (k8s.io/apiserver's cacher/consistency), the feed checks its
// state against the API server. It clones the state and its position under
// the lock (O(1)), and off the lock digests the clone and the API server's
// LIST at exactly that resourceVersion, page by page. When they differ it
// names the first objects that do and relists, which repairs the state and
// sends subscribers the differences as changes from a relist.

// CheckOutcome is what one consistency check found.
type CheckOutcome int

const (
	// CheckConsistent: the state equals the API server's at its position.
	CheckConsistent CheckOutcome = iota
	// CheckDiverged: it does not; the feed relists.
	CheckDiverged
	// CheckCompacted: the API server no longer serves the position (etcd
	// compacted it while the check listed); the next check tries a newer
	// one. Not an alarm.
	CheckCompacted
	// CheckFailed: the check could not finish (the LIST failed, the feed
	// stopped, the clone was ended for memory).
	CheckFailed
)

func (o CheckOutcome) String() string {
	switch o {
	case CheckConsistent:
		return "consistent"
	case CheckDiverged:
		return "diverged"
	case CheckCompacted:
		return "compacted"
	default:
		return "failed"
	}
}

// CheckResult is one consistency check's findings.
type CheckResult struct {
	Outcome CheckOutcome
	// RV is the position checked; Hub and APIServer the digests of the
	// state there and of the API server's LIST at it.
	RV             uint64
	Hub, APIServer digest.Set
	// Differing are the first objects that differ (at most
	// maxNamedDifferences), Different how many do, when the check diverged
	// and the API server still served the position to find them.
	Differing []Difference
	Different int
	// Err is why the check failed, or the compaction it met.
	Err error
}

// Difference is an object the hub and the API server hold differently at
// the checked position: a uid and resourceVersion empty on the side that
// lacks it.
type Difference struct {
	Namespace, Name     string
	HubUID, HubRV       string
	APIServerUID, APIRV string
}

func (d Difference) String() string {
	return fmt.Sprintf("%s/%s: hub uid=%q rv=%q, API server uid=%q rv=%q", d.Namespace, d.Name, d.HubUID, d.HubRV, d.APIServerUID, d.APIRV)
}

// maxNamedDifferences bounds the objects a diverged check names.
const maxNamedDifferences = 5

// errNotSynced: the feed has no state to check yet.
var errNotSynced = errors.New("the informer has not synced")

// Check compares the state with the API server's LIST at the state's
// position, listing pageSize objects a page. It never holds the feed's
// lock while it digests or lists. It checks the digests the feed keeps
// of its state as well, and repairs them if they are not the state's.
func (f *Feed) Check(ctx context.Context, pageSize int64) CheckResult {
	at, err := f.cloneForCheck()
	if err != nil {
		return CheckResult{Outcome: CheckFailed, Err: err}
	}
	defer f.CloseClone(at.clone)
	rv := at.pos.RV
	res := CheckResult{RV: rv}
	// The state is digested itself, not its kept digest: that costs a
	// walk of the clone, adding the hashes the objects keep; per
	// namespace as well as in all, so that a divergence is named by
	// listing again the namespaces that differ, not by a map of every
	// object. The kept digests are checked against it at once, while the
	// history still holds the changes since the clone to repair them.
	hubNS, err := digestTree(ctx, at.tree, at.clone)
	if err != nil {
		return CheckResult{Outcome: CheckFailed, RV: rv, Err: err}
	}
	res.Hub = hubNS.total()
	if !res.Hub.Equal(at.kept) {
		kept := maps.Clone(hubNS)
		for ns, set := range kept {
			copied := *set
			kept[ns] = &copied
		}
		repaired := f.repairDigests(stateDigests{all: res.Hub, byNamespace: kept}, at.pos.Seq)
		f.log.Error("the digest the feed kept of its state was not the state's: a bug in the hub",
			"kept", at.kept.String(), "state", res.Hub.String(), "resourceVersion", rv, "repaired", repaired)
	}
	apiNS := namespaceDigests{}
	err = listExact(ctx, f.lw, rv, pageSize, at.clone, func(ns, name, uid, objRV string) {
		apiNS.add(ns, digest.Of(ns, name, uid, objRV))
	})
	res.APIServer = apiNS.total()
	if err != nil {
		res.Outcome, res.Err = listOutcome(err), err
		return res
	}
	if res.Hub.Equal(res.APIServer) {
		res.Outcome = CheckConsistent
		return res
	}
	res.Outcome = CheckDiverged
	differ := map[string]bool{}
	for ns, set := range hubNS {
		if other := apiNS[ns]; other == nil || !set.Equal(*other) {
			differ[ns] = true
		}
	}
	for ns := range apiNS {
		if hubNS[ns] == nil {
			differ[ns] = true
		}
	}
	res.Differing, res.Different, res.Err = differencesAt(ctx, f.lw, rv, pageSize, at.tree, at.clone, differ)
	return res
}

// checkedState is what a check compares: a clone of the state, counted as
// a snapshot's clone is (the caller closes it), its position, and the
// digest the feed kept of it.
type checkedState struct {
	tree  *btree.BTreeG[*state.Object]
	pos   state.Position
	kept  digest.Set
	clone *state.Clone
}

func (f *Feed) cloneForCheck() (checkedState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.err != nil:
		return checkedState{}, f.err
	case !f.store.synced || f.store.pos.RV == 0:
		return checkedState{}, errNotSynced
	}
	st := f.store
	return checkedState{tree: st.state.Clone(), pos: st.pos, kept: st.digests.all, clone: st.clones.Take()}, nil
}

// repairDigests replaces the feed's kept digests by d, the state's at seq,
// with the changes recorded since; it reports false, and leaves them for
// the next check, when the history no longer holds those changes. d's
// namespace digests are the feed's after it.
func (f *Feed) repairDigests(d stateDigests, seq uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.store
	for s := seq + 1; s <= st.pos.Seq; s++ {
		r, ok := st.history.Get(s)
		if !ok {
			return false
		}
		// Added first, as in applyAll.
		if r.Type != event.Deleted {
			d.add(r.Object)
		}
		if r.Previous != nil {
			d.remove(r.Previous)
		}
	}
	st.digests = d
	return true
}

// digestTree digests a clone of the state per namespace, giving up when
// ctx ends or the clone is ended for memory.
func digestTree(ctx context.Context, tree *btree.BTreeG[*state.Object], clone *state.Clone) (namespaceDigests, error) {
	sets := namespaceDigests{}
	var err error
	n := 0
	tree.Ascend(func(o *state.Object) bool {
		if n++; n%1024 == 0 {
			if err = ctx.Err(); err == nil {
				err = clone.Err()
			}
			if err != nil {
				return false
			}
		}
		sets.add(o.Namespace, o.Hash())
		return true
	})
	return sets, err
}

// errNotExact: the API server answered a LIST at another resourceVersion
// than asked, as one that does not serve resourceVersionMatch=Exact (an
// aggregated API) does. Its answer proves nothing either way.
var errNotExact = errors.New("the API server answered at another resourceVersion than asked: it does not list at an exact resourceVersion")

// listExact lists the resource type at exactly rv, pageSize objects a
// page, calling each for every object. It stops when the clone the caller
// compares with is ended for memory.
func listExact(ctx context.Context, lw cache.ListerWatcher, rv uint64, pageSize int64, clone *state.Clone, each func(ns, name, uid, rv string)) error {
	lwc := cache.ToListerWatcherWithContext(lw)
	want := strconv.FormatUint(rv, 10)
	opts := metav1.ListOptions{ResourceVersion: want, ResourceVersionMatch: metav1.ResourceVersionMatchExact, Limit: pageSize}
	for {
		list, err := lwc.ListWithContext(ctx, opts)
		if err != nil {
			return err
		}
		lm, err := meta.ListAccessor(list)
		if err != nil {
			return err
		}
		if got := lm.GetResourceVersion(); got != want {
			return fmt.Errorf("%w (%s, not %s)", errNotExact, got, want)
		}
		if err := clone.Err(); err != nil {
			return err
		}
		if err := eachListed(list, each); err != nil {
			return err
		}
		if lm.GetContinue() == "" {
			return nil
		}
		// A continue token holds the version; the API server refuses both.
		opts.Continue, opts.ResourceVersion, opts.ResourceVersionMatch = lm.GetContinue(), "", ""
	}
}

func eachListed(list runtime.Object, each func(ns, name, uid, rv string)) error {
	return meta.EachListItem(list, func(obj runtime.Object) error {
		m, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		each(m.GetNamespace(), m.GetName(), string(m.GetUID()), m.GetResourceVersion())
		return nil
	})
}

// listOutcome tells a compacted position (410 Gone, at the first page or
// at a continue token) from a failure.
func listOutcome(err error) CheckOutcome {
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		return CheckCompacted
	}
	return CheckFailed
}

// differencesAt names the objects that differ between tree and the API
// server's LIST at rv, in the namespaces of differ: those the LIST lacks
// or holds otherwise, then those tree lacks. It names the first
// maxNamedDifferences, and counts them all. It holds a map of those
// namespaces' objects only.
func differencesAt(ctx context.Context, lw cache.ListerWatcher, rv uint64, pageSize int64, tree *btree.BTreeG[*state.Object], clone *state.Clone, differ map[string]bool) ([]Difference, int, error) {
	type key struct{ ns, name string }
	hub := map[key]*state.Object{}
	for ns := range differ {
		tree.AscendGreaterOrEqual(&state.Object{Namespace: ns}, func(o *state.Object) bool {
			if o.Namespace != ns {
				return false
			}
			hub[key{o.Namespace, o.Name}] = o
			return true
		})
	}
	var named []Difference
	different := 0
	note := func(d Difference) {
		if different++; len(named) < maxNamedDifferences {
			named = append(named, d)
		}
	}
	err := listExact(ctx, lw, rv, pageSize, clone, func(ns, name, uid, objRV string) {
		if !differ[ns] {
			return
		}
		k := key{ns, name}
		o := hub[k]
		delete(hub, k)
		d := Difference{Namespace: ns, Name: name, APIServerUID: uid, APIRV: objRV}
		if o != nil {
			d.HubUID, d.HubRV = o.UID, strconv.FormatUint(o.RV, 10)
			if d.HubUID == uid && d.HubRV == objRV {
				return
			}
		}
		note(d)
	})
	if err != nil {
		return nil, 0, err
	}
	// Then what the hub holds and the API server does not, in the
	// state's order.
	for _, ns := range slices.Sorted(maps.Keys(differ)) {
		tree.AscendGreaterOrEqual(&state.Object{Namespace: ns}, func(o *state.Object) bool {
			if o.Namespace != ns {
				return false
			}
			if _, left := hub[key{o.Namespace, o.Name}]; left {
				note(Difference{Namespace: o.Namespace, Name: o.Name, HubUID: o.UID, HubRV: strconv.FormatUint(o.RV, 10)})
			}
			return true
		})
	}
	return named, different, nil
}

// CheckConfig is how often a feed checks itself, and how.
type CheckConfig struct {
	// Interval between checks, each jittered up to a fifth longer; 0: the
	// feed never checks.
	Interval time.Duration
	// PageSize is the objects per page of the check's LIST.
	PageSize int64
}

// checkLoop checks the feed every interval (jittered) until ctx ends or
// the feed stops, and repairs what a check finds.
func (f *Feed) checkLoop(ctx context.Context, cfg CheckConfig) {
	select {
	case <-f.ready.synced:
	case <-f.stopped:
		return
	case <-ctx.Done():
		return
	}
	for {
		t := time.NewTimer(cfg.Interval + time.Duration(rand.Int64N(int64(cfg.Interval)/5+1)))
		select {
		case <-t.C:
		case <-f.stopped:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		}
		started := time.Now()
		res := f.Check(ctx, cfg.PageSize)
		if ctx.Err() != nil {
			return // the feed or the hub stopped during the check: no finding
		}
		f.checked(res, time.Since(started))
	}
}

// checked counts and logs a check's result, and relists when it diverged.
// Each line says how long the check took, from the clone to the last
// comparison: what a check of that many objects costs, for choosing
// --consistency-check-interval; test/bench's consistency check scenario
// times the checks by it.
func (f *Feed) checked(res CheckResult, took time.Duration) {
	switch res.Outcome {
	case CheckConsistent:
		f.counters.ChecksConsistent.Add(1)
		f.log.Debug("the cache matches the API server", "resourceVersion", res.RV, "objects", res.Hub.Count(), "digest", res.Hub.String(), "took", took)
	case CheckCompacted:
		f.counters.ChecksCompacted.Add(1)
		f.log.Info("consistency check skipped: the API server no longer serves the position (compacted); the next check lists the position the cache has then",
			"resourceVersion", res.RV, "error", res.Err, "took", took)
	case CheckFailed:
		if errors.Is(res.Err, errNotSynced) || f.IsStopped() {
			return
		}
		f.counters.ChecksFailed.Add(1)
		f.log.Warn("consistency check failed", "resourceVersion", res.RV, "error", res.Err, "took", took)
	case CheckDiverged:
		f.counters.ChecksDiverged.Add(1)
		differing := make([]string, len(res.Differing))
		for i, d := range res.Differing {
			differing[i] = d.String()
		}
		f.log.Error("the cache differs from the API server's at the same resourceVersion; relisting to repair it",
			"resourceVersion", res.RV, "hubObjects", res.Hub.Count(), "hubDigest", res.Hub.String(),
			"apiServerObjects", res.APIServer.Count(), "apiServerDigest", res.APIServer.String(),
			"differentObjects", res.Different, "firstDifferent", differing, "findingThemFailed", res.Err, "took", took)
		f.lwc.relist()
	}
}
