package celfilter

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"k8s.io/apimachinery/pkg/util/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"

	"github.com/informerhub/informerhub/informerhub/projection"
)

// Compiler compiles filters and keeps them, so that subscribers of the
// same expression share one. It is safe for concurrent use.
type Compiler struct {
	maxEstimatedCost uint64
	maxCost          uint64
	counts           counts

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
	f      *Filter
	err    error
	weight int64
}

const (
	// maxObjectBytes is the cost model's size of the largest object: see
	// the package's doc.
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

// NewCompiler returns a Compiler of filters whose estimated cost on the
// largest objects is at most maxEstimatedCost, and whose evaluations stop
// at maxCost.
func NewCompiler(maxEstimatedCost, maxCost uint64) *Compiler {
	return &Compiler{
		maxEstimatedCost: maxEstimatedCost,
		maxCost:          maxCost,
		cache:            map[[sha256.Size]byte]compiled{},
	}
}

// Counts reports the work the compiler's filters did.
func (c *Compiler) Counts() Counts {
	return Counts{Decodes: c.counts.decodes.Load(), Evaluations: c.counts.evaluations.Load(), RegexRuns: c.counts.regexRuns.Load()}
}

// Error is an expression that cannot be a filter: it does not compile, is
// not of type bool, or may cost more than allowed. Its Reason says why, for
// a person, in cel-go's form (ERROR: <input>:line:column: ...) where it can.
type Error struct{ Reason string }

func (e *Error) Error() string { return e.Reason }

// celEnv builds the environment on first use: it costs about a millisecond,
// which a hub that is never asked for a filter need not pay.
func (c *Compiler) celEnv() (*cel.Env, error) {
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

// Compile returns the filter of an expression: an *Error when the
// expression cannot be one, which is kept as a filter is, so that asking
// again costs nothing.
func (c *Compiler) Compile(expr string) (*Filter, error) {
	key := sha256.Sum256([]byte(expr))
	c.mu.Lock()
	if hit, ok := c.cache[key]; ok {
		c.mu.Unlock()
		return hit.f, hit.err
	}
	c.mu.Unlock()
	f, weight, err := c.build(expr)
	var exprErr *Error
	switch {
	case errors.As(err, &exprErr):
		exprErr.Reason = truncate(exprErr.Reason, maxCachedReason)
		weight = int64(len(exprErr.Reason)) + 128
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
func (c *Compiler) build(expr string) (*Filter, int64, error) {
	env, err := c.celEnv()
	if err != nil {
		return nil, 0, fmt.Errorf("celfilter: building the CEL environment: %w", err)
	}
	invalid := func(reason string) error { return &Error{Reason: reason} }
	// Parsed first, so that its regular expressions are bounded before
	// the checker compiles them (see regexPatterns).
	parsed, issues := env.Parse(expr)
	if issues != nil && issues.Err() != nil {
		return nil, 0, invalid(celErrors(expr, issues))
	}
	costs := &filterCosts{lib: &library.CostEstimator{SizeEstimator: objectSizes{}}, counts: &c.counts}
	var insts int
	costs.patterns, insts, err = regexPatterns(parsed)
	if err != nil {
		return nil, 0, invalid(err.Error())
	}
	ast, issues := env.Check(parsed)
	if issues != nil && issues.Err() != nil {
		return nil, 0, invalid(celErrors(expr, issues))
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
		return nil, 0, fmt.Errorf("celfilter: %d of the filter's %d regular expression calls were planned with their cost", planned, regexCalls(ast))
	}
	weight := int64(len(expr))*filterWeightPerExprByte + int64(insts)*filterWeightPerRegexInst
	return &Filter{expr: expr, id: nextID.Add(1), prog: prog, reads: objectReads(ast), counts: &c.counts}, weight, nil
}

// celErrors formats the issues of expr as cel-go prints them: each with
// its line and column from 1 (in characters), then the expression's line
// with a caret under the column, so that a person sees where it is:
//
//	ERROR: <input>:1:17: Syntax error: mismatched input '<EOF>' expecting ...
//	 | object.data.v ==
//	 | ................^
//
// Unlike cel-go's, a long line shows only the characters around the
// column, and only the first few errors are shown, so that the message
// stays short (it is sent in a header).
func celErrors(expr string, issues *cel.Issues) string {
	// A message may quote the expression (an undeclared name, a literal):
	// cut, so that the carets fit in the reason (maxCachedReason).
	const maxErrors, context, maxMessage = 3, 40, 200
	lines := strings.Split(expr, "\n")
	var b strings.Builder
	errs := issues.Errors()
	for i, e := range errs {
		if i == maxErrors {
			fmt.Fprintf(&b, "\n(and %d more)", len(errs)-maxErrors)
			break
		}
		if i > 0 {
			b.WriteString("\n")
		}
		line, col := e.Location.Line(), e.Location.Column()
		fmt.Fprintf(&b, "ERROR: <input>:%d:%d: %s", line, col+1, truncate(e.Message, maxMessage))
		if line < 1 || line > len(lines) {
			continue
		}
		text := []rune(lines[line-1])
		if col < 0 || col > len(text) {
			continue
		}
		from, to, before, after := max(0, col-context), min(len(text), col+context), "", ""
		if from > 0 {
			before = "…"
		}
		if to < len(text) {
			after = "…"
		}
		// A tab or carriage return shown as itself would move the caret.
		shown := strings.NewReplacer("\t", " ", "\r", " ").Replace(string(text[from:to]))
		fmt.Fprintf(&b, "\n | %s%s%s\n | %s^", before, shown, after,
			strings.Repeat(".", len([]rune(before))+col-from))
	}
	return b.String()
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
func objectReads(checked *cel.Ast) *projection.Tree {
	idents := celast.MatchDescendants(celast.NavigateAST(checked.NativeRep()), func(e celast.NavigableExpr) bool {
		return e.Kind() == celast.IdentKind && e.AsIdent() == "object"
	})
	reads := &projection.Tree{}
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
		reads.Add(path)
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

// truncate shortens s to at most max bytes and an ellipsis, cutting before
// a character rather than through it: a reason stays valid UTF-8.
func truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max] + "..."
}
