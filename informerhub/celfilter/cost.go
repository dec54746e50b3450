package celfilter

import (
	"math"
	"regexp"

	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apiserver/pkg/cel/library"
)

type filterCosts struct {
	lib      *library.CostEstimator
	patterns map[string]int // the filter's patterns, with their instructions
	counts   *counts        // the compiler's, for the regular expressions run
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
					c.counts.regexRuns.Add(1)
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
