package celfilter

import (
	"fmt"
	"regexp/syntax"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/overloads"
)

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
			bad = fmt.Errorf("%s invalid regular expression %q: %v", at(pattern), truncate(s, 64), err)
			return
		}
		if total += regexSize(re, maxFilterRegexInsts-total); total > maxFilterRegexInsts {
			bad = fmt.Errorf("%s the expression's regular expressions compile into more than the %d instructions allowed: simplify them (x{100} counts x a hundred times)", at(pattern), maxFilterRegexInsts)
			return
		}
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			bad = fmt.Errorf("%s invalid regular expression %q: %v", at(pattern), truncate(s, 64), err)
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
