// Package celfilter compiles and evaluates the hub's filters. A filter is a
// CEL expression over `object`, the object as the API server serves it, as
// JSON values; it selects the objects it evaluates to true for. The dialect
// is Kubernetes' own, exactly as a ValidatingAdmissionPolicy sees `object`:
// the Kubernetes base environment of k8s.io/apiserver (its libraries, its
// language options, its cost model), at the default compatibility version,
// with `object` of type dyn, and an expression must be of type bool. Two
// differences, both about regular expressions (regex.go): their patterns
// must be string literals, and they cost what they compile into, where
// Kubernetes counts their length.
//
// Evaluation: an expression whose evaluation fails (a field that is missing,
// which has() guards against; a type mismatch) does not select the object.
// So an object whose change makes an expression fail where it was true
// leaves the selection (DELETED), as if it were false.
//
// Cost is bounded twice, as the API server bounds CEL: at compile time by
// the expression's estimated cost (Compiler's maxEstimatedCost), where
// every value reachable from `object` is assumed as large as the largest
// request the API server accepts (3 MiB; metadata name and labels are
// bounded by their own limits), which refuses expressions that grow with
// the square of an object's size; and at run time by the cost of each
// evaluation (its maxCost), far below the API server's (1,000,000) because
// the hub evaluates filters on the path of every change. An evaluation that
// exceeds it says so (Filter.Eval), for the hub to refuse the filter where
// it happened.
//
// Sharing: identical expressions compile once (Compiler) and share one
// Filter. Decoding an object for CEL (Filter.Decode) and evaluating it
// (Filter.Eval) are apart, so that the hub decodes each object of a change
// once for every filter it evaluates on it, on the paths they read together
// (Filter.Reads), and caches the results on its objects.
package celfilter
