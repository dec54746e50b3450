package celfilter

import (
	"errors"
	"sync/atomic"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/informerhub/informerhub/informerhub/projection"
)

// Filter is a compiled expression. It is immutable, and safe for
// concurrent use.
type Filter struct {
	expr string
	id   uint64
	prog cel.Program
	// reads are the paths of `object` the expression reads, each whole (see
	// objectReads); nil when it reads the object as a whole. Only they are
	// decoded for it.
	reads *projection.Tree
	// counts are its compiler's.
	counts *counts
	// lastFailure is the filter's last Failure (see Failed).
	lastFailure atomic.Pointer[Failure]
}

// Failure is why a filter could not decide on an object, as its caller
// words it. It is immutable.
type Failure struct{ Reason string }

// Failed returns a Failure of reason: the filter's previous one when it
// reads the same, so that the objects on which a filter fails the same way
// (a field they all lack) share one, whatever their number.
func (f *Filter) Failed(reason string) *Failure {
	if last := f.lastFailure.Load(); last != nil && last.Reason == reason {
		return last
	}
	failure := &Failure{Reason: reason}
	f.lastFailure.Store(failure)
	return failure
}

// Expr is the filter's expression.
func (f *Filter) Expr() string { return f.expr }

// ID tells filters apart: it is unique to each filter compiled in this
// process, so that results cached per filter cannot be mistaken for
// another's.
func (f *Filter) ID() uint64 { return f.id }

// Reads returns the paths of `object` the expression reads, each whole: an
// object projected on them is the same to the expression as the whole
// object. It returns nil when the expression reads the object as a whole.
// Never modify it.
func (f *Filter) Reads() *projection.Tree { return f.reads }

// nextID numbers filters across every compiler of the process.
var nextID atomic.Uint64

// Decode returns the CEL value of a JSON object for evaluation, projected
// on reads (nil or projection.Whole: the whole object): the paths of the
// filters it is decoded for, together.
func (f *Filter) Decode(obj []byte, reads *projection.Tree) (ref.Val, error) {
	f.counts.decodes.Add(1)
	if reads != nil && reads != projection.Whole {
		projected, err := reads.Apply(obj, 0)
		if err != nil {
			return nil, err
		}
		obj = projected
	}
	var m map[string]any
	if err := utiljson.Unmarshal(obj, &m); err != nil {
		return nil, err
	}
	return types.DefaultTypeAdapter.NativeToValue(m), nil
}

// Eval evaluates the filter on an object (Decode's value): whether it
// selects it, and whether the evaluation stopped on the cost limit. An
// evaluation that fails (err) does not decide: what that means is the
// caller's (the hub sends the object, marked).
func (f *Filter) Eval(object ref.Val) (match, costly bool, err error) {
	f.counts.evaluations.Add(1)
	out, _, err := f.prog.Eval(activation{object: object})
	if err != nil {
		var cancelled interpreter.EvalCancelledError
		return false, errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded, err
	}
	return out == types.True, false, nil
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

// Counts is the work a compiler's filters did, for tests and benchmarks.
type Counts struct {
	// Decodes counts the objects decoded for evaluation, Evaluations the
	// evaluations, and RegexRuns the regular expressions matched.
	Decodes, Evaluations, RegexRuns uint64
}

type counts struct {
	decodes, evaluations, regexRuns atomic.Uint64
}
