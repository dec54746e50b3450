package informerhub

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/overloads"
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
// be of type bool. Two differences, both about regular expressions (see
// regexPatterns): their patterns must be string literals, and they cost
// what they compile into, where Kubernetes counts their length.
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
// that exceeds it on an object its selector otherwise selects is refused
// with that selector (filteruse.go).
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
	// maxFilterRegexInsts bounds the instructions of a filter's regular
	// expressions together: a few bytes of pattern can compile into
	// thousands, each a step per byte matched. Patterns of real filters
	// take tens.
	maxFilterRegexInsts = 5_000
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
		reqErr.Reason = truncateTo(reqErr.Reason, maxCachedReason)
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
	// Parsed first, so that its regular expressions are bounded before
	// the checker compiles them (see regexPatterns).
	parsed, issues := env.Parse(expr)
	if issues != nil && issues.Err() != nil {
		return nil, 0, invalid(celErrors(issues))
	}
	costs := &filterCosts{lib: &library.CostEstimator{SizeEstimator: objectSizes{}}}
	var insts int
	costs.patterns, insts, err = regexPatterns(parsed)
	if err != nil {
		return nil, 0, invalid(err.Error())
	}
	ast, issues := env.Check(parsed)
	if issues != nil && issues.Err() != nil {
		return nil, 0, invalid(celErrors(issues))
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return nil, 0, invalid(fmt.Sprintf("the expression must evaluate to bool but is of type %v: compare it, e.g. object.spec.paused == true", ast.OutputType()))
	}
	estimate, err := env.EstimateCost(ast, costs)
	if err != nil {
		return nil, 0, invalid("cannot estimate the expression's cost: " + err.Error())
	}
	if estimate.Max > c.maxEstimatedCost {
		return nil, 0, invalid(fmt.Sprintf("the expression's estimated cost on the largest objects is %d, more than the %d allowed: avoid nested comprehensions over the object, and regular expressions over strings of unbounded size",
			estimate.Max, c.maxEstimatedCost))
	}
	// The environment's program options (cost tracking, its regular
	// expressions) come first: these replace its PerCallLimit, its cost
	// of regular expressions, and their evaluation.
	var planned int
	prog, err := env.Program(ast, cel.CostLimit(c.maxCost), cel.CostTracking(costs),
		cel.OptimizeRegex(costs.regexOptimizations(c.maxCost, &planned)...))
	if err != nil {
		return nil, 0, invalid("cannot plan the expression: " + err.Error())
	}
	if planned != regexCalls(ast) {
		// Every call of a regular expression must be gated by its cost.
		return nil, 0, fmt.Errorf("informerhub: %d of the filter's %d regular expression calls were planned with their cost", planned, regexCalls(ast))
	}
	weight := int64(len(expr))*filterWeightPerExprByte + int64(insts)*filterWeightPerRegexInst
	return &filter{expr: expr, id: nextFilterID.Add(1), prog: prog, reads: objectReads(ast)}, weight, nil
}

// celErrors formats the issues of an expression as cel-go prints them,
// with lines from 1 and columns from 1 (in characters).
func celErrors(issues *cel.Issues) string {
	var msgs []string
	for _, e := range issues.Errors() {
		msgs = append(msgs, fmt.Sprintf("ERROR: <input>:%d:%d: %s", e.Location.Line(), e.Location.Column()+1, e.Message))
	}
	return strings.Join(msgs, "; ")
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

// Regular expressions. The cost model of CEL and Kubernetes charges a
// regular expression by its pattern's length, and a call's cost only once
// it has run; Go's regexp takes time in the length of the string times the
// instructions the pattern compiles into, and a short pattern
// ("(a?){999}") compiles into thousands. So a filter's regular expressions
// are bounded three ways:
//
//   - Their patterns must be string literals, bounded together by
//     maxFilterRegexInsts before anything compiles them (regexPatterns):
//     a pattern computed per object would be compiled per evaluation, at a
//     cost nobody bounds.
//   - They are charged by the larger of their length and their
//     instructions, statically and at run time (filterCosts).
//   - A call that would cost more than a whole evaluation may does not run
//     (regexOptimizations): the evaluation stops there as having exceeded
//     its cost, as it would have once the call returned.

// regexOverloads are the environment's functions that take a regular
// expression, by overload: matches, Kubernetes' find and findAll. In each,
// the string searched is the call's first argument (its target) and the
// pattern its second.
var regexOverloads = map[string]string{
	overloads.Matches:            "matches",
	overloads.MatchesString:      "matches",
	"string_find_string":         "find",
	"string_find_all_string":     "findAll",
	"string_find_all_string_int": "findAll",
}

// regexPatterns returns the patterns of a parsed expression's regular
// expressions, each with the instructions it compiles into, and their
// total. It refuses a pattern that is not a string literal, or that does
// not parse, and patterns that compile into more than maxFilterRegexInsts
// instructions together, which it tells before compiling them.
func regexPatterns(parsed *cel.Ast) (map[string]int, int, error) {
	patterns := map[string]int{}
	total := int64(0)
	info := parsed.NativeRep().SourceInfo()
	at := func(e celast.Expr) string {
		loc := info.GetStartLocation(e.ID())
		return fmt.Sprintf("ERROR: <input>:%d:%d:", loc.Line(), loc.Column()+1)
	}
	var bad error
	celast.PreOrderVisit(parsed.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() != celast.CallKind || bad != nil {
			return
		}
		call := e.AsCall()
		fn := call.FunctionName()
		if fn != "matches" && fn != "find" && fn != "findAll" {
			return
		}
		args := call.Args()
		if len(args) == 0 {
			return // no such overload: the checker says so
		}
		// The pattern: a method's first argument (its target is the
		// string searched), matches(string, pattern)'s last.
		pattern := args[0]
		if !call.IsMemberFunction() {
			pattern = args[len(args)-1]
		}
		s, ok := "", pattern.Kind() == celast.LiteralKind
		if ok {
			s, ok = pattern.AsLiteral().Value().(string)
		}
		if !ok {
			bad = fmt.Errorf("%s the pattern of %s must be a string literal: a pattern computed per object cannot be bounded in advance", at(pattern), fn)
			return
		}
		// Each call counts: each compiles its pattern.
		re, err := syntax.Parse(s, syntax.Perl)
		if err != nil {
			bad = fmt.Errorf("%s invalid regular expression %q: %v", at(pattern), truncate(s), err)
			return
		}
		if total += regexSize(re, maxFilterRegexInsts-total); total > maxFilterRegexInsts {
			bad = fmt.Errorf("%s the expression's regular expressions compile into more than the %d instructions allowed: simplify them (x{100} counts x a hundred times)", at(pattern), maxFilterRegexInsts)
			return
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			bad = fmt.Errorf("%s invalid regular expression %q: %v", at(pattern), truncate(s), err)
			return
		}
		patterns[s] = len(prog.Inst)
	}))
	return patterns, int(total), bad
}

// regexSize bounds the instructions a parsed pattern compiles into, as Go's
// parser bounds them (regexp/syntax's calcSize, plus the program's fail and
// match), without expanding its repetitions; past limit, it returns more
// than limit, whatever the rest.
func regexSize(re *syntax.Regexp, limit int64) int64 {
	return 2 + regexNodeSize(re, max(limit-2, 0))
}

func regexNodeSize(re *syntax.Regexp, limit int64) int64 {
	var size int64
	switch re.Op {
	case syntax.OpLiteral:
		size = int64(len(re.Rune))
	case syntax.OpCapture, syntax.OpStar:
		size = 2 + regexNodeSize(re.Sub[0], limit)
	case syntax.OpPlus, syntax.OpQuest:
		size = 1 + regexNodeSize(re.Sub[0], limit)
	case syntax.OpConcat, syntax.OpAlternate:
		for _, sub := range re.Sub {
			if size += regexNodeSize(sub, limit-size); size > limit {
				return size
			}
		}
		if re.Op == syntax.OpAlternate {
			size += int64(len(re.Sub)) - 1
		}
	case syntax.OpRepeat:
		// x{2,5} = xx(x(x(x)?)?)?, x{2,} = xx(x)*
		sub := regexNodeSize(re.Sub[0], limit)
		n := int64(max(re.Max, re.Min, 1))
		if sub > (limit+1)/n {
			return limit + 1
		}
		size = n*sub + int64(max(re.Max-re.Min, 2))
	}
	return max(1, size)
}

// regexCalls counts the calls of regular expressions of a checked
// expression.
func regexCalls(checked *cel.Ast) int {
	n := 0
	for _, ref := range checked.NativeRep().ReferenceMap() {
		if len(ref.OverloadIDs) > 0 {
			if _, ok := regexOverloads[ref.OverloadIDs[0]]; ok {
				n++
			}
		}
	}
	return n
}

// filterCosts is a filter's cost model: Kubernetes' (library.CostEstimator,
// with objectSizes), except for regular expressions, charged by the larger
// of their pattern's length and its instructions (see above). It serves the
// static estimate and the cost tracking of evaluations.
type filterCosts struct {
	lib      *library.CostEstimator
	patterns map[string]int // the filter's patterns, with their instructions
}

// regexCost is what matching a pattern costs per unit of string, as CEL
// counts it: a quarter per character of the pattern, here per instruction
// when there are more.
func (c *filterCosts) regexCost(pattern string) uint64 {
	return uint64(math.Ceil(float64(max(len(pattern), c.patterns[pattern])) * common.RegexStringLengthCostFactor))
}

// regexCallCost is the cost of matching a string of strLen bytes, as CEL
// counts it (a tenth per byte, and one), times the pattern's cost.
func regexCallCost(strLen int, regexCost uint64) uint64 {
	return uint64(math.Ceil((1+float64(strLen))*common.StringTraversalCostFactor)) * regexCost
}

// regexOperands returns the string and pattern nodes of a call of a
// regular expression, if it is one with a literal pattern.
func regexOperands(overloadID string, target *checker.AstNode, args []checker.AstNode) (checker.AstNode, string, bool) {
	if _, ok := regexOverloads[overloadID]; !ok {
		return nil, "", false
	}
	if target != nil {
		args = append([]checker.AstNode{*target}, args...)
	}
	if len(args) < 2 || args[1].Expr().Kind() != celast.LiteralKind {
		return nil, "", false
	}
	pattern, ok := args[1].Expr().AsLiteral().Value().(string)
	return args[0], pattern, ok
}

func (c *filterCosts) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	return c.lib.EstimateSize(n)
}

func (c *filterCosts) EstimateCallCost(function, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	str, pattern, ok := regexOperands(overloadID, target, args)
	if !ok {
		return c.lib.EstimateCallCost(function, overloadID, target, args)
	}
	size := checker.SizeEstimate{Min: 0, Max: math.MaxUint64}
	if s := str.ComputedSize(); s != nil {
		size = *s
	} else if s := c.lib.EstimateSize(str); s != nil {
		size = *s
	}
	est := c.lib.EstimateCallCost(function, overloadID, target, args) // find's result size
	if est == nil {
		est = &checker.CallEstimate{}
	}
	est.CostEstimate = size.Add(checker.SizeEstimate{Min: 1, Max: 1}).
		MultiplyByCostFactor(common.StringTraversalCostFactor).
		MultiplyByCostFactor(float64(c.regexCost(pattern)))
	return est
}

func (c *filterCosts) CallCost(function, overloadID string, args []ref.Val, result ref.Val) *uint64 {
	if _, ok := regexOverloads[overloadID]; ok && len(args) >= 2 {
		str, ok1 := args[0].Value().(string)
		pattern, ok2 := args[1].Value().(string)
		if ok1 && ok2 {
			cost := regexCallCost(len(str), c.regexCost(pattern))
			return &cost
		}
	}
	return c.lib.CallCost(function, overloadID, args, result)
}

// regexOptimizations compiles the filter's patterns once, when its program
// is planned, as cel-go's and Kubernetes' own optimizations do, and gates
// each call: one that would cost more than maxCost by itself returns an
// error without running, which its cost then stops the evaluation on
// (CallCost charges it as if it had run). planned counts the calls.
func (c *filterCosts) regexOptimizations(maxCost uint64, planned *int) []*interpreter.RegexOptimization {
	var opts []*interpreter.RegexOptimization
	for overloadID, fn := range regexOverloads {
		opts = append(opts, &interpreter.RegexOptimization{
			Function:   fn,
			OverloadID: overloadID,
			RegexIndex: 1,
			Factory: func(call interpreter.InterpretableCall, pattern string) (interpreter.InterpretableCall, error) {
				re, err := regexp.Compile(pattern)
				if err != nil {
					return nil, err
				}
				*planned++
				regexCost := c.regexCost(pattern)
				return interpreter.NewCall(call.ID(), call.Function(), call.OverloadID(), call.Args(), func(args ...ref.Val) ref.Val {
					if len(args) < 2 || len(args) > 3 {
						return types.NoSuchOverloadErr()
					}
					in, ok := args[0].Value().(string)
					if !ok {
						return types.MaybeNoSuchOverloadErr(args[0])
					}
					if cost := regexCallCost(len(in), regexCost); cost > maxCost {
						return types.NewErr("matching %d bytes would cost %d, more than the %d allowed", len(in), cost, maxCost)
					}
					regexRuns.Add(1)
					switch fn {
					case "matches":
						return types.Bool(re.MatchString(in))
					case "find":
						return types.String(re.FindString(in))
					}
					n := int64(-1)
					if len(args) == 3 {
						if n, ok = args[2].Value().(int64); !ok {
							return types.MaybeNoSuchOverloadErr(args[2])
						}
					}
					return types.NewStringList(types.DefaultTypeAdapter, re.FindAllString(in, int(n)))
				}), nil
			},
		})
	}
	return opts
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
	// costly are the filters that exceeded their cost limit, each with the
	// object it exceeded it on, once each.
	costly []costlyEvaluation
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
	if c := (costlyEvaluation{filter: f, obj: o}); costly && !slices.Contains(ev.costly, c) {
		ev.costly = append(ev.costly, c)
	}
}

// costlyEvaluation is a filter's evaluation that exceeded its cost limit.
type costlyEvaluation struct {
	filter *filter
	obj    *object
}

// reset forgets the objects and results, for the next object of a scan;
// what was costly stays.
func (ev *evaluation) reset() {
	clear(ev.decoded)
	ev.decoded, ev.results = ev.decoded[:0], ev.results[:0]
}

// decodes counts the objects decoded for filters, evaluations the filters
// evaluated, and regexRuns the regular expressions run, for the tests and
// benchmarks.
var decodes, evaluations, regexRuns atomic.Uint64

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
