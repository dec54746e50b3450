package informerhub

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
)

// A filter is a CEL expression over `object`, the object as the API server
// serves it, as JSON values; it selects the objects it evaluates to true
// for. The dialect is Kubernetes' own, exactly as a ValidatingAdmissionPolicy
// sees `object`: the Kubernetes base environment of k8s.io/apiserver
// (its libraries, its language options, its cost model), at the default
// compatibility version, with `object` of type dyn, and an expression must
// be of type bool.
//
// Evaluation: an expression whose evaluation fails (a field that is missing,
// which has() guards against; a type mismatch; the runtime cost limit) does
// not select the object. So an object whose change makes an expression fail
// where it was true leaves the selection (DELETED), as if it were false.
//
// Cost is bounded twice, as the API server bounds CEL: at compile time by
// the expression's estimated cost (Config.MaxFilterEstimatedCost), where
// every value reachable from `object` is assumed as large as the largest
// request the API server accepts (3 MiB; metadata name and labels are
// bounded by their own limits), which refuses expressions that grow with
// the square of an object's size; and at run time by the cost of each
// evaluation (Config.MaxFilterCost). The runtime limit is far below the API
// server's (1,000,000) because the hub evaluates filters as it dispatches
// each change, once per distinct expression: the limit bounds what one
// change can cost, MaxFiltersPerResource times MaxFilterCost.
//
// Sharing: identical expressions compile once (filterCompiler) and share one
// filter. Each object caches the results of the filters evaluated on it
// (objects are immutable), and dispatch decodes an object for CEL at most
// once per change however many filters evaluate it (decodeCache).
type filter struct {
	expr string
	id   uint64 // unique per compiled filter, for the results cached on objects
	prog cel.Program
}

// filterCompiler compiles filters and keeps them, so that subscribers of
// the same expression share one.
type filterCompiler struct {
	maxEstimatedCost uint64
	maxCost          uint64
	maxCached        int

	envOnce sync.Once
	env     *cel.Env
	envErr  error

	mu sync.Mutex // guards cache
	// cache holds compiled filters, and the errors of expressions that do
	// not compile, by expression; bounded by maxCached.
	cache map[string]compiled
}

type compiled struct {
	f   *filter
	err error
}

// Cost model of the static estimate: see filter.
const (
	maxObjectBytes = uint64(celconfig.MaxRequestSizeBytes)
	// filterCacheSize bounds the compiled expressions kept; more are
	// compiled again when asked for.
	filterCacheSize = 1024
)

func newFilterCompiler(cfg *Config) *filterCompiler {
	return &filterCompiler{
		maxEstimatedCost: cfg.MaxFilterEstimatedCost,
		maxCost:          cfg.MaxFilterCost,
		maxCached:        filterCacheSize,
		cache:            map[string]compiled{},
	}
}

// celEnv builds the environment on first use: it costs about a millisecond,
// which a hub that is never asked for a filter need not pay.
func (c *filterCompiler) celEnv() (*cel.Env, error) {
	c.envOnce.Do(func() {
		set, err := environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()).Extend(
			environment.VersionedOptions{
				IntroducedVersion: version.MajorMinor(1, 0),
				EnvOptions:        []cel.EnvOption{cel.Variable("object", cel.DynType)},
			},
		)
		if err != nil {
			c.envErr = err
			return
		}
		// The environment a new ValidatingAdmissionPolicy expression is
		// checked against.
		c.env = set.NewExpressionsEnv()
	})
	return c.env, c.envErr
}

// compile returns the filter of an expression: a *RequestError naming
// selector.filter when it does not compile, is not of type bool, or may
// cost more than allowed.
func (c *filterCompiler) compile(expr string) (*filter, error) {
	c.mu.Lock()
	if hit, ok := c.cache[expr]; ok {
		c.mu.Unlock()
		return hit.f, hit.err
	}
	c.mu.Unlock()
	f, err := c.build(expr)
	if err != nil && !errors.Is(err, ErrInvalidRequest) {
		return nil, err // not the expression's fault: not cached
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if hit, ok := c.cache[expr]; ok {
		return hit.f, hit.err // compiled meanwhile by another request
	}
	if len(c.cache) >= c.maxCached {
		for k := range c.cache { // drop one, any: it is compiled again if asked for
			delete(c.cache, k)
			break
		}
	}
	c.cache[expr] = compiled{f: f, err: err}
	return f, err
}

func (c *filterCompiler) build(expr string) (*filter, error) {
	env, err := c.celEnv()
	if err != nil {
		return nil, fmt.Errorf("informerhub: building the CEL environment: %w", err)
	}
	invalid := func(reason string) error {
		return &RequestError{Field: FieldFilter, Err: ErrInvalidRequest, Reason: reason}
	}
	ast, issues := env.Compile(expr)
	if issues != nil && issues.Err() != nil {
		var msgs []string
		for _, e := range issues.Errors() {
			// Lines from 1, columns from 1 (in characters), as cel-go
			// prints them.
			msgs = append(msgs, fmt.Sprintf("ERROR: <input>:%d:%d: %s", e.Location.Line(), e.Location.Column()+1, e.Message))
		}
		return nil, invalid(strings.Join(msgs, "; "))
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return nil, invalid(fmt.Sprintf("the expression must evaluate to bool but is of type %v: compare it, e.g. object.spec.paused == true", ast.OutputType()))
	}
	estimate, err := env.EstimateCost(ast, &library.CostEstimator{SizeEstimator: objectSizes{}})
	if err != nil {
		return nil, invalid("cannot estimate the expression's cost: " + err.Error())
	}
	if estimate.Max > c.maxEstimatedCost {
		return nil, invalid(fmt.Sprintf("the expression's estimated cost on the largest objects is %d, more than the %d allowed: avoid nested comprehensions over the object",
			estimate.Max, c.maxEstimatedCost))
	}
	prog, err := env.Program(ast,
		// The environment's program options (cost tracking) come first;
		// this limit replaces its PerCallLimit.
		cel.CostLimit(c.maxCost),
		cel.InterruptCheckFrequency(celconfig.CheckFrequency),
	)
	if err != nil {
		return nil, invalid("cannot plan the expression: " + err.Error())
	}
	return &filter{expr: expr, id: nextFilterID.Add(1), prog: prog}, nil
}

// nextFilterID numbers filters across every hub of the process: the results
// cached on an object are told apart by it.
var nextFilterID atomic.Uint64

// objectSizes bounds the size of every value reachable from `object` for the
// static cost estimate: metadata names and labels by what the API server
// allows of them, anything else by the largest request it accepts (a string
// that long, a list or map of half as many elements).
type objectSizes struct{}

func (objectSizes) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	path := n.Path()
	if len(path) == 0 || path[0] != "object" {
		return nil
	}
	size := func(max uint64) *checker.SizeEstimate { return &checker.SizeEstimate{Max: max} }
	if len(path) >= 3 && path[1] == "metadata" {
		switch rest := path[2:]; {
		case len(rest) == 1 && (rest[0] == "name" || rest[0] == "namespace" || rest[0] == "generateName"):
			return size(253)
		case len(rest) == 2 && rest[0] == "labels" && rest[1] == "@values":
			return size(63)
		case len(rest) == 2 && rest[0] == "labels" && rest[1] == "@keys":
			return size(317)
		}
	}
	switch n.Type().Kind() {
	case types.StringKind, types.BytesKind:
		return size(maxObjectBytes)
	}
	return size(maxObjectBytes / 2)
}

func (objectSizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// filterResult is a filter's result on an object, cached on the object.
type filterResult struct {
	id    uint64
	match bool
}

// maxCachedFilterResults bounds the results an object keeps; the oldest go
// first.
const maxCachedFilterResults = 16

// matches reports whether the filter selects o. dc, when not nil, shares
// decoded objects between the filters evaluated on one change; errs, when
// not nil, counts the evaluations that fail.
func (f *filter) matches(o *object, dc *decodeCache, errs *atomic.Uint64) bool {
	cached := o.filters.Load()
	if cached != nil {
		for _, r := range *cached {
			if r.id == f.id {
				return r.match
			}
		}
	}
	match := false
	val, err := dc.value(o)
	if err == nil {
		var out ref.Val
		out, _, err = f.prog.Eval(activation{object: val})
		match = err == nil && out == types.True
	}
	if err != nil && errs != nil {
		errs.Add(1)
	}
	for {
		n := 0
		if cached != nil {
			n = min(len(*cached), maxCachedFilterResults-1)
		}
		next := make([]filterResult, 0, n+1)
		if cached != nil {
			next = append(next, (*cached)[len(*cached)-n:]...)
		}
		next = append(next, filterResult{id: f.id, match: match})
		if o.filters.CompareAndSwap(cached, &next) {
			return match
		}
		cached = o.filters.Load()
	}
}

// activation binds `object` for an evaluation.
type activation struct{ object ref.Val }

func (a activation) ResolveName(name string) (any, bool) {
	if name == "object" {
		return a.object, true
	}
	return nil, false
}

func (activation) Parent() cel.Activation { return nil }

// decodeCache holds the CEL values of the objects of one change (its new and
// previous state), decoded on first use. A nil *decodeCache decodes every
// time.
type decodeCache struct {
	objs [2]*object
	vals [2]ref.Val
}

// decodes counts the objects decoded for filters, for the benchmarks.
var decodes atomic.Uint64

func (c *decodeCache) value(o *object) (ref.Val, error) {
	if c != nil {
		for i, cached := range c.objs {
			if cached == o {
				return c.vals[i], nil
			}
		}
	}
	decodes.Add(1)
	var m map[string]any
	if err := utiljson.Unmarshal(o.jsonBytes(), &m); err != nil {
		return nil, err
	}
	val := types.DefaultTypeAdapter.NativeToValue(m)
	if c != nil {
		i := 0
		if c.objs[0] != nil {
			i = 1
		}
		c.objs[i], c.vals[i] = o, val
	}
	return val, nil
}
