package informerhub

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
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
// which has() guards against; a type mismatch) does not select the object.
// So an object whose change makes an expression fail where it was true
// leaves the selection (DELETED), as if it were false.
//
// Cost is bounded twice, as the API server bounds CEL: at compile time by
// the expression's estimated cost (Config.MaxFilterEstimatedCost), where
// every value reachable from `object` is assumed as large as the largest
// request the API server accepts (3 MiB; metadata name and labels are
// bounded by their own limits), which refuses expressions that grow with
// the square of an object's size; and at run time by the cost of each
// evaluation (Config.MaxFilterCost), far below the API server's (1,000,000)
// because the hub evaluates filters on the path of every change. A filter
// that exceeds it is refused on the resource type (filteruse.go).
//
// Sharing: identical expressions compile once (filterCompiler) and share one
// filter. Each object caches the results of the filters evaluated on it
// (objects are immutable), and one change decodes its objects for CEL at
// most once and evaluates each filter once per object, however many
// selectors hold it (evaluation).
type filter struct {
	expr string
	id   uint64 // unique per compiled filter, for the results cached on objects
	prog cel.Program
	// reads are the paths of `object` the expression reads, each whole (see
	// objectReads); nil when it reads the object as a whole. Only they are
	// decoded for it.
	reads *projNode
}

// filterCompiler compiles filters and keeps them, so that subscribers of
// the same expression share one.
type filterCompiler struct {
	maxEstimatedCost uint64
	maxCost          uint64

	envOnce sync.Once
	env     *cel.Env
	envErr  error

	mu sync.Mutex // guards cache, order and cachedBytes
	// cache holds compiled filters, and the errors of expressions that do
	// not compile, by the expression's digest; order holds the digests
	// from the oldest. Together they are bounded by filterCacheEntries and
	// filterCacheBytes (each entry's weight); the oldest go first. A
	// filter in use stays referenced by its selectors whatever the cache
	// drops.
	cache       map[[sha256.Size]byte]compiled
	order       [][sha256.Size]byte
	cachedBytes int64
}

type compiled struct {
	f      *filter
	err    error
	weight int64
}

const (
	// maxObjectBytes is the cost model's size of the largest object: see
	// filter.
	maxObjectBytes = uint64(celconfig.MaxRequestSizeBytes)
	// filterCacheEntries and filterCacheBytes bound the compiled
	// expressions (and refused ones) kept for reuse.
	filterCacheEntries = 1024
	filterCacheBytes   = 32 << 20
	// maxFilterRegexInsts bounds the instructions of the regular
	// expressions a filter compiles ahead of its evaluations (the
	// constant patterns of matches, find and findAll): a few hundred bytes
	// of pattern can compile into megabytes.
	maxFilterRegexInsts = 20_000
	// Weights of a compiled filter in the cache: its expression's bytes
	// (its AST and program hold some tens of times as much) and its
	// compiled patterns' instructions.
	filterWeightPerExprByte  = 64
	filterWeightPerRegexInst = 64
	// maxCachedReason bounds the reason of a refused expression kept in
	// the cache.
	maxCachedReason = 2048
)

func newFilterCompiler(cfg *Config) *filterCompiler {
	return &filterCompiler{
		maxEstimatedCost: cfg.MaxFilterEstimatedCost,
		maxCost:          cfg.MaxFilterCost,
		cache:            map[[sha256.Size]byte]compiled{},
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
	key := sha256.Sum256([]byte(expr))
	c.mu.Lock()
	if hit, ok := c.cache[key]; ok {
		c.mu.Unlock()
		return hit.f, hit.err
	}
	c.mu.Unlock()
	f, weight, err := c.build(expr)
	var reqErr *RequestError
	switch {
	case errors.As(err, &reqErr):
		if len(reqErr.Reason) > maxCachedReason {
			reqErr.Reason = reqErr.Reason[:maxCachedReason] + "..."
		}
		weight = int64(len(reqErr.Reason)) + 128
	case err != nil:
		return nil, err // not the expression's fault: not cached
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if hit, ok := c.cache[key]; ok {
		return hit.f, hit.err // compiled meanwhile by another request
	}
	for len(c.order) > 0 && (len(c.order) >= filterCacheEntries || c.cachedBytes+weight > filterCacheBytes) {
		c.cachedBytes -= c.cache[c.order[0]].weight
		delete(c.cache, c.order[0])
		c.order = c.order[1:]
	}
	c.cache[key] = compiled{f: f, err: err, weight: weight}
	c.order = append(c.order, key)
	c.cachedBytes += weight
	return f, err
}

// build compiles an expression, and returns its weight in the cache.
func (c *filterCompiler) build(expr string) (*filter, int64, error) {
	env, err := c.celEnv()
	if err != nil {
		return nil, 0, fmt.Errorf("informerhub: building the CEL environment: %w", err)
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
		return nil, 0, invalid(strings.Join(msgs, "; "))
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return nil, 0, invalid(fmt.Sprintf("the expression must evaluate to bool but is of type %v: compare it, e.g. object.spec.paused == true", ast.OutputType()))
	}
	estimate, err := env.EstimateCost(ast, &library.CostEstimator{SizeEstimator: objectSizes{}})
	if err != nil {
		return nil, 0, invalid("cannot estimate the expression's cost: " + err.Error())
	}
	if estimate.Max > c.maxEstimatedCost {
		return nil, 0, invalid(fmt.Sprintf("the expression's estimated cost on the largest objects is %d, more than the %d allowed: avoid nested comprehensions over the object",
			estimate.Max, c.maxEstimatedCost))
	}
	insts, err := regexInstructions(ast)
	if err != nil {
		return nil, 0, invalid(err.Error())
	}
	if insts > maxFilterRegexInsts {
		return nil, 0, invalid(fmt.Sprintf("the expression's regular expressions compile into %d instructions, more than the %d allowed: simplify them", insts, maxFilterRegexInsts))
	}
	// The environment's program options (cost tracking) come first; this
	// limit replaces its PerCallLimit.
	prog, err := env.Program(ast, cel.CostLimit(c.maxCost))
	if err != nil {
		return nil, 0, invalid("cannot plan the expression: " + err.Error())
	}
	weight := int64(len(expr))*filterWeightPerExprByte + int64(insts)*filterWeightPerRegexInst
	return &filter{expr: expr, id: nextFilterID.Add(1), prog: prog, reads: objectReads(ast)}, weight, nil
}

// objectReads returns the paths of `object` an expression reads, as a
// projection that keeps each whole: the chains of field selections and
// indexes by constant strings that start at `object` (object.spec.nodeName,
// object.metadata.labels["app"], has(object.status.phase)), each up to
// where something else is done with its value. An object projected on them
// is the same to the expression as the whole object, and costs a fraction
// of decoding it. It returns nil, the whole object, when the expression
// uses `object` itself (iterates over it, compares it, passes it to a
// function).
func objectReads(checked *cel.Ast) *projNode {
	idents := celast.MatchDescendants(celast.NavigateAST(checked.NativeRep()), func(e celast.NavigableExpr) bool {
		return e.Kind() == celast.IdentKind && e.AsIdent() == "object"
	})
	reads := &projNode{}
	for _, ident := range idents {
		var path []string
		for e := ident; ; {
			parent, ok := e.Parent()
			if !ok {
				break
			}
			step, ok := readStep(parent, e)
			if !ok {
				break
			}
			path, e = append(path, step), parent
		}
		if len(path) == 0 {
			return nil
		}
		reads.add(path)
	}
	return reads
}

// readStep returns the member of child that parent reads, if parent is a
// field selection (plain, optional, or a presence test) or an index by a
// constant string of child.
func readStep(parent, child celast.NavigableExpr) (string, bool) {
	switch parent.Kind() {
	case celast.SelectKind:
		sel := parent.AsSelect()
		return sel.FieldName(), sel.Operand().ID() == child.ID()
	case celast.CallKind:
		call := parent.AsCall()
		switch call.FunctionName() {
		case operators.Index, operators.OptIndex, operators.OptSelect:
		default:
			return "", false
		}
		args := call.Args()
		if len(args) != 2 || args[0].ID() != child.ID() || args[1].Kind() != celast.LiteralKind {
			return "", false
		}
		name, ok := args[1].AsLiteral().Value().(string)
		return name, ok
	}
	return "", false
}

// regexInstructions counts the instructions of the regular expressions an
// expression compiles ahead of its evaluations: the constant patterns of
// matches, find and findAll.
func regexInstructions(checked *cel.Ast) (int, error) {
	total := 0
	var bad error
	celast.PreOrderVisit(checked.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() != celast.CallKind || bad != nil {
			return
		}
		call := e.AsCall()
		switch call.FunctionName() {
		case "matches", "find", "findAll":
		default:
			return
		}
		args := call.Args()
		if len(args) == 0 {
			return
		}
		// The pattern: matches' last argument, find's and findAll's first
		// (their target is the string searched).
		pattern := args[len(args)-1]
		if call.FunctionName() != "matches" {
			pattern = args[0]
		}
		if pattern.Kind() != celast.LiteralKind {
			return // a pattern computed at run time costs its evaluation
		}
		s, ok := pattern.AsLiteral().Value().(string)
		if !ok {
			return
		}
		re, err := syntax.Parse(s, syntax.Perl)
		if err != nil {
			bad = fmt.Errorf("invalid regular expression %q: %v", truncate(s), err)
			return
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			bad = fmt.Errorf("invalid regular expression %q: %v", truncate(s), err)
			return
		}
		total += len(prog.Inst)
	}))
	return total, bad
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

// matches reports whether the filter selects o. ev, when not nil, shares
// decoded objects and results between the filters evaluated on one change
// (or one object of a scan), and collects the filters that exceeded their
// cost; errs, when not nil, counts the evaluations that fail.
//
// Results are cached on the object, except those of evaluations that
// exceeded the cost limit: each evaluator of such a filter on such an
// object learns it (see costlyFilterError).
func (f *filter) matches(o *object, ev *evaluation, errs *atomic.Uint64) bool {
	cached := o.filters.Load()
	if cached != nil {
		for _, r := range *cached {
			if r.id == f.id {
				return r.match
			}
		}
	}
	if match, ok := ev.result(o, f); ok {
		return match
	}
	match, costly := false, false
	evaluations.Add(1)
	val, err := ev.value(o, f)
	if err == nil {
		var out ref.Val
		out, _, err = f.prog.Eval(activation{object: val})
		match = err == nil && out == types.True
		var cancelled interpreter.EvalCancelledError
		costly = errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded
	}
	if err != nil && errs != nil {
		errs.Add(1)
	}
	ev.remember(o, f, match, costly)
	if costly {
		return false
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

// evaluation is the scratch of the filter evaluations on the objects of
// one change (its new and previous state), or on one object of a scan: each
// object is decoded for CEL at most once, each filter evaluated on it at
// most once, whatever the number of groups that ask (the results the
// objects cache themselves are bounded, and fewer than the filters a
// resource type may have); and it collects the filters whose evaluation
// exceeded the cost limit. A nil *evaluation shares and collects nothing.
type evaluation struct {
	// decoded are the objects decoded for CEL, each as projected on the
	// paths some filters read (nil: whole).
	decoded []decodedObject
	results []evaluated
	// costly are the filters that exceeded their cost limit, once each.
	costly []*filter
	// reads, when set, is what the filters shared holds read of every
	// object, together (see union): each object of the change is decoded
	// once, for all of them.
	reads  *projNode
	shared []uint64 // the ids of those filters
}

type decodedObject struct {
	obj   *object
	reads *projNode
	val   ref.Val
}

// share makes the evaluation decode each object once for all the filters,
// as projected on what they read together.
func (ev *evaluation) share(filters []*filter) {
	ev.reads = &projNode{}
	for _, f := range filters {
		if f.reads == nil {
			ev.reads = nil // one of them reads the whole object
		} else if ev.reads != nil {
			ev.reads.merge(f.reads)
		}
		ev.shared = append(ev.shared, f.id)
	}
	if ev.reads == nil {
		ev.reads = wholeObject
	}
}

// wholeObject is what an evaluation decodes for a filter that reads the
// whole object.
var wholeObject = &projNode{whole: true}

// readsOf returns what to decode of objects for f: what the evaluation's
// shared filters read, if f is one of them, or else what f reads.
func (ev *evaluation) readsOf(f *filter) *projNode {
	if ev != nil && ev.reads != nil && slices.Contains(ev.shared, f.id) {
		return ev.reads
	}
	if f.reads == nil {
		return wholeObject
	}
	return f.reads
}

type evaluated struct {
	obj   *object
	id    uint64
	match bool
}

func (ev *evaluation) result(o *object, f *filter) (match, ok bool) {
	if ev == nil {
		return false, false
	}
	for _, r := range ev.results {
		if r.obj == o && r.id == f.id {
			return r.match, true
		}
	}
	return false, false
}

func (ev *evaluation) remember(o *object, f *filter, match, costly bool) {
	if ev == nil {
		return
	}
	ev.results = append(ev.results, evaluated{obj: o, id: f.id, match: match})
	if costly && !slices.Contains(ev.costly, f) {
		ev.costly = append(ev.costly, f)
	}
}

// reset forgets the objects and results, for the next object of a scan;
// what was costly stays.
func (ev *evaluation) reset() {
	clear(ev.decoded)
	ev.decoded, ev.results = ev.decoded[:0], ev.results[:0]
}

// decodes counts the objects decoded for filters, and evaluations the
// filters evaluated, for the tests and benchmarks.
var decodes, evaluations atomic.Uint64

// decodeWhole returns the CEL value of the whole object, for tests.
func (ev *evaluation) decodeWhole(o *object) (ref.Val, error) {
	return ev.value(o, &filter{})
}

// value returns the CEL value of o as f reads it, decoding it on first use.
func (ev *evaluation) value(o *object, f *filter) (ref.Val, error) {
	reads := ev.readsOf(f)
	if ev != nil {
		for _, d := range ev.decoded {
			if d.obj == o && d.reads == reads {
				return d.val, nil
			}
		}
	}
	decodes.Add(1)
	data := o.jsonBytes()
	if reads != wholeObject {
		projected, err := project(reads, data, 0)
		if err != nil {
			return nil, err
		}
		data = projected
	}
	var m map[string]any
	if err := utiljson.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	val := types.DefaultTypeAdapter.NativeToValue(m)
	if ev != nil {
		ev.decoded = append(ev.decoded, decodedObject{obj: o, reads: reads, val: val})
	}
	return val, nil
}
