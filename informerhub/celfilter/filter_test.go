package celfilter

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/cel-go/common/types"
)

// The hub's defaults (informerhub.Config).
const (
	defaultMaxEstimatedCost = 10_000_000
	defaultMaxCost          = 10_000
	defaultMaxFilterLength  = 4096
)

func testCompiler(maxCost uint64) *Compiler {
	if maxCost == 0 {
		maxCost = defaultMaxCost
	}
	return NewCompiler(defaultMaxEstimatedCost, maxCost)
}

// match evaluates f on a JSON object, as the hub does on one it has not
// seen: it reports whether f selects it, and whether the evaluation
// stopped on its cost. errs counts a failed evaluation.
func match(t testing.TB, f *Filter, obj string, errs *atomic.Uint64) (match, costly bool) {
	t.Helper()
	val, err := f.Decode([]byte(obj), f.Reads())
	if err != nil {
		t.Fatalf("Decode(%s): %v", obj, err)
	}
	match, costly, err = f.Eval(val)
	if err != nil && errs != nil {
		errs.Add(1)
	}
	return match, costly
}

func TestFilterCompileErrors(t *testing.T) {
	c := testCompiler(0)
	tests := []struct {
		expr string
		want string // in the reason
	}{
		{"foo == 1", "ERROR: <input>:1:1: undeclared reference to 'foo'"},
		{"object.spec.replicas ==", "ERROR: <input>:1:24: Syntax error"},
		// Where: the expression's line, with a caret under the column.
		{"object.spec.replicas ==", "\n | object.spec.replicas ==\n | .......................^"},
		{"object.metadata.name == 'a' &&\n  bar", "\n |   bar\n | ..^"},
		// A long line: the characters around the column only.
		{strings.Repeat("true && ", 20) + "nope", "\n | …true && true && true && true && true && nope\n | " + strings.Repeat(".", 41) + "^"},
		// A message quoting a long name: cut, the carets kept.
		{strings.Repeat("a", 3000) + " == 1", "\n | " + strings.Repeat("a", 40) + "…\n | ^"},
		// A tab shows as a space, so the caret stays under its column.
		{"\tnope", "\n |  nope\n | .^"},
		// Many errors: the first three.
		{"a && b && c && d && e", "ERROR: <input>:1:11: undeclared reference to 'c'"},
		{"object.metadata.name == 'a' &&\n  bar", "ERROR: <input>:2:3: undeclared reference to 'bar'"},
		{`object.metadata.name.matches("[")`, "ERROR: <input>:1:30:"},
		{"object.metadata.name", "must evaluate to bool but is of type dyn"},
		{"1 + 2", "must evaluate to bool but is of type int"},
		{"object.spec.containers.all(c, object.spec.containers.all(d, c.name != d.name || c == d))", "estimated cost on the largest objects"},
		// A few hundred bytes of pattern that would compile into megabytes.
		{`object.metadata.name.matches("` + strings.Repeat("[a-z]{1000}", 30) + `")`, "regular expressions compile into"},
		{`object.metadata.name.findAll("` + strings.Repeat("[a-z]{1000}", 30) + `").size() > 0`, "regular expressions compile into"},
		// Short patterns of nested repetitions, many times over: refused at
		// the first, before any compiles.
		{strings.Repeat(`"".matches("(?:(?:a?){99}){10}") || `, 100) + "true", "ERROR: <input>:1:84: the expression's regular expressions compile into more than"},
		{`object.metadata.name.matches("(?:a?){999}") && object.metadata.name.matches("(?:b?){999}") && object.metadata.name.matches("(?:a?){999}")`,
			"regular expressions compile into more than the 5000"},
		// Patterns computed per object.
		{`object.metadata.name.matches(object.metadata.namespace)`, "ERROR: <input>:1:"},
		{`object.metadata.name.matches(object.metadata.namespace)`, "the pattern of matches must be a string literal"},
		{`matches(object.metadata.name, "^a" + "b")`, "the pattern of matches must be a string literal"},
		{`object.metadata.name.find(string("a")) == "a"`, "the pattern of find must be a string literal"},
		{`object.metadata.name.findAll(object.metadata.name, 2).size() == 2`, "the pattern of findAll must be a string literal"},
		// Regular expressions over strings of unbounded size are charged by
		// their instructions: 12 characters, hundreds of instructions.
		{`object.data.x.matches("(?:a?){200}b")`, "estimated cost on the largest objects"},
	}
	for _, tt := range tests {
		_, err := c.Compile(tt.expr)
		var exprErr *Error
		if !errors.As(err, &exprErr) {
			t.Errorf("Compile(%q) = %v, want an *Error", tt.expr, err)
			continue
		}
		if !strings.Contains(exprErr.Reason, tt.want) {
			t.Errorf("Compile(%q): reason %q does not say %q", tt.expr, exprErr.Reason, tt.want)
		}
	}
	_, err := c.Compile("a && b && c && d && e")
	if reason := err.Error(); strings.Count(reason, "ERROR:") != 3 || !strings.HasSuffix(reason, "(and 2 more)") {
		t.Errorf("five errors: %q, want the first three and a count of the rest", reason)
	}
}

func TestIdenticalExpressionsCompileOnce(t *testing.T) {
	c := testCompiler(0)
	a, err := c.Compile(`object.metadata.name == "a"`)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Compile(`object.metadata.name == "a"`)
	if err != nil || a != b {
		t.Errorf("the same expression compiled twice: %p and %p (%v)", a, b, err)
	}
	_, err1 := c.Compile("nope")
	_, err2 := c.Compile("nope")
	if err1 == nil || err1 != err2 {
		t.Errorf("an expression that does not compile: %v, then %v; want the same error, cached", err1, err2)
	}
}

func TestFilterEvaluation(t *testing.T) {
	c := testCompiler(0)
	const o = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","labels":{"app":"web"}},"spec":{"replicas":3,"containers":[{"image":"nginx:1"},{"image":"envoy"}]},"status":{"phase":"Running"}}`
	tests := []struct {
		expr string
		want bool
	}{
		{`object.status.phase == "Running"`, true},
		{`object.spec.replicas == 3 && object.spec.replicas > 2.5`, true},
		{`object.spec.containers.exists(c, c.image.startsWith("nginx"))`, true},
		{`object.metadata.labels["app"] == "web"`, true},
		{`"tier" in object.metadata.labels`, false},
		{`object.metadata.name.matches("^web-[0-9]+$")`, true},
		{`matches(object.metadata.name, "^web-")`, true},
		{`object.metadata.name.find("[0-9]+") == "1"`, true},
		{`object.status.phase.findAll("[nN]") == ["n", "n", "n"]`, true},
		{`object.status.phase.findAll("[nN]", 1) == ["n"]`, true},
		// Evaluation errors do not select.
		{`object.spec.missing == 1`, false},
		{`object.metadata.annotations["a"] == "b"`, false},
		{`has(object.metadata.annotations) && object.metadata.annotations["a"] == "b"`, false},
		{`!has(object.metadata.annotations)`, true},
		{`object.?metadata.?annotations["a"].orValue("") == ""`, true},
	}
	for _, tt := range tests {
		f, err := c.Compile(tt.expr)
		if err != nil {
			t.Fatalf("compile(%q): %v", tt.expr, err)
		}
		if got, _ := match(t, f, o, nil); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.expr, got, tt.want)
		}
	}
}

func TestFilterRuntimeCostLimit(t *testing.T) {
	var items []string
	for range 200 {
		items = append(items, `{"image":"busybox"}`)
	}
	o := `{"metadata":{"name":"a"},"spec":{"containers":[` + strings.Join(items, ",") + `]}}`
	const expr = `object.spec.containers.exists(c, c.image.startsWith("nginx")) || true`
	for _, tt := range []struct {
		maxCost uint64
		want    bool
	}{{maxCost: 100, want: false}, {maxCost: defaultMaxCost, want: true}} {
		c := testCompiler(tt.maxCost)
		f, err := c.Compile(expr)
		if err != nil {
			t.Fatal(err)
		}
		var errs atomic.Uint64
		if got, _ := match(t, f, o, &errs); got != tt.want {
			t.Errorf("MaxFilterCost %d: matches = %v, want %v", tt.maxCost, got, tt.want)
		}
		if n := errs.Load(); (n == 1) == tt.want {
			t.Errorf("MaxFilterCost %d: %d evaluation errors counted", tt.maxCost, n)
		}
	}
}

// A regular expression is charged by its instructions, and a call that
// would cost more than an evaluation may does not run: the evaluation stops
// as costly, even where the call's result would not matter.
func TestRegularExpressionsCostTheirInstructions(t *testing.T) {
	name := strings.Repeat("a", 253)
	o := `{"metadata":{"name":"` + name + `"}}`
	c := testCompiler(1000)
	// 26 per unit of pattern over 253 bytes: 12 characters cost 78, its
	// hundreds of instructions more than 1000.
	for _, expr := range []string{
		`object.metadata.name.matches("(?:a?){100}b")`,
		`object.metadata.name.matches("(?:a?){100}b") || true`,
		`object.metadata.name.find("(?:a?){100}b") == "" || true`,
		`object.metadata.name.findAll("(?:a?){100}b", 1).size() == 0 || true`,
	} {
		f, err := c.Compile(expr)
		if err != nil {
			t.Fatalf("compile(%q): %v", expr, err)
		}
		runs := c.Counts().RegexRuns
		if selected, costly := match(t, f, o, nil); selected || !costly {
			t.Errorf("%s: selected %v, costly %v; want it stopped as costly", expr, selected, costly)
		}
		if n := c.Counts().RegexRuns - runs; n != 0 {
			t.Errorf("%s: %d regular expressions ran; want none to", expr, n)
		}
	}
	// The same length of pattern, as many instructions: runs.
	f, err := c.Compile(`object.metadata.name.matches("^a+$|^b+$|^c+$")`)
	if err != nil {
		t.Fatal(err)
	}
	runs := c.Counts().RegexRuns
	if selected, costly := match(t, f, o, nil); !selected || costly || c.Counts().RegexRuns != runs+1 {
		t.Errorf("a cheap pattern: selected %v, costly %v, %d runs", selected, costly, c.Counts().RegexRuns-runs)
	}
}

func TestRegexSizeBoundsCompiledInstructions(t *testing.T) {
	for _, pattern := range []string{"a", "abc", "^web-[0-9]+$", "(a|b|c)*d", "a{2,5}", "(?:ab){3,}", "x{0,3}y?z+", "(?i)hello|world", `\bfoo\b`, "(?:(?:a?){9}){3}", "[[:alpha:]]{4}.*$", "(a)(b)(c)"} {
		re, err := syntax.Parse(pattern, syntax.Perl)
		if err != nil {
			t.Fatal(err)
		}
		bound := regexSize(re, 1<<20)
		prog, err := syntax.Compile(re.Simplify())
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(prog.Inst)) > bound {
			t.Errorf("%q compiles into %d instructions; bounded by %d", pattern, len(prog.Inst), bound)
		}
		if over := regexSize(re, 3); bound > 3 && over <= 3 {
			t.Errorf("%q: past a limit of 3, size %d", pattern, over)
		}
	}
}

// FuzzFilter compiles arbitrary expressions and evaluates those that
// compile on an object: no input may panic, and every evaluation ends
// within its cost limit.
func FuzzFilter(f *testing.F) {
	f.Add(`object.metadata.name == "a"`)
	f.Add(`object.spec.containers.exists(c, c.image.startsWith("nginx"))`)
	f.Add(`object.metadata.labels.all(k, k.matches("^[a-z]+$"))`)
	f.Add(`size(object.spec.containers.map(c, c.name).filter(n, n != "")) > 1`)
	f.Add(`object.?status.?phase.orValue("") == "Running" && quantity("1Gi").isGreaterThan(quantity("1Mi"))`)
	c := testCompiler(0)
	const o = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","labels":{"app":"web","tier":"a"}},"spec":{"containers":[{"name":"a","image":"nginx"},{"name":"b","image":"envoy"}]},"status":{"phase":"Running"}}`
	f.Fuzz(func(t *testing.T, expr string) {
		if len(expr) > defaultMaxFilterLength {
			return
		}
		flt, err := c.Compile(expr)
		if err != nil {
			return
		}
		var errs atomic.Uint64
		match(t, flt, o, &errs)
	})
}

// TestFilterCacheIsBounded checks that the compiled expressions kept for
// reuse stay within their bounds of entries and bytes, however many
// distinct ones are asked for.
func TestFilterCacheIsBounded(t *testing.T) {
	c := testCompiler(0)
	check := func(what string) {
		t.Helper()
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.cache) != len(c.order) || len(c.cache) > filterCacheEntries || c.cachedBytes > filterCacheBytes {
			t.Errorf("%s: the cache holds %d entries (%d in order) weighing %d bytes, bounds %d and %d",
				what, len(c.cache), len(c.order), c.cachedBytes, filterCacheEntries, filterCacheBytes)
		}
		var sum int64
		for _, e := range c.cache {
			sum += e.weight
		}
		if sum != c.cachedBytes {
			t.Errorf("%s: the entries weigh %d bytes, the cache counts %d", what, sum, c.cachedBytes)
		}
	}
	// Long expressions reach the bound of bytes (each weighs about 230 KB).
	long := strings.Repeat(`object.metadata.name == "abcdefghij" || `, 90)
	for i := range 200 {
		c.Compile(fmt.Sprintf(`%sobject.metadata.name == "%d"`, long, i))
	}
	check("long expressions")
	// Short ones, that of entries; refused ones count too, by their reason.
	for i := range filterCacheEntries + 100 {
		expr := fmt.Sprintf(`object.metadata.name == "%d"`, i)
		if i%3 == 0 {
			expr += " +"
		}
		c.Compile(expr)
	}
	check("short expressions")
}

// TestFilterReadsDecideAsTheWholeObject checks that the object projected on
// what a filter reads gives every expression the result the whole object
// gives, errors included, on objects that have and lack what it reads.
func TestFilterReadsDecideAsTheWholeObject(t *testing.T) {
	c := testCompiler(0)
	objects := []string{
		`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"shop","uid":"u-1","resourceVersion":"42","labels":{"app":"web","app.kubernetes.io/name":"web"}},"spec":{"nodeName":"node-a","containers":[{"name":"app","image":"nginx:1"},{"name":"side","image":"envoy"}],"hostNetwork":true},"status":{"phase":"Running","podIPs":[{"ip":"10.0.0.1"}],"conditions":[]}}`,
		`{"kind":"Pod","metadata":{"name":"a","labels":{"app":"db","x":"1"}},"spec":{"containers":[{"name":"c","image":"envoy"}],"replicas":3},"status":{"phase":"Failed"}}`,
		`{"kind":"Pod","metadata":{"name":"b"},"spec":{},"status":{}}`,
		`{"kind":"Pod","metadata":{"name":"c","annotations":{"a.b/c":"d"}},"spec":{"nodeName":null,"containers":"not a list"},"data":{"v":"on","w":"2"}}`,
		`{"metadata":{"name":"d"}}`,
	}
	exprs := []struct {
		expr      string
		readsSome bool // objectReads is not the whole object
	}{
		{`object.spec.nodeName == "node-a"`, true},
		{`has(object.spec.nodeName)`, true},
		{`has(object.status.phase) && object.status.phase == "Running"`, true},
		{`object.metadata.labels["app"] == "web"`, true},
		{`object.metadata.labels.app == "web"`, true},
		{`"app" in object.metadata.labels`, true},
		{`object.metadata.labels.exists(k, k.startsWith("a"))`, true},
		{`object.spec.containers.exists(c, c.image.startsWith("nginx"))`, true},
		{`object.spec.containers[0].image == "nginx:1"`, true},
		{`size(object.spec.containers) > 1`, true},
		{`object.?status.?phase.orValue("") == "Running"`, true},
		{`object.?metadata.?annotations[?"a.b/c"].orValue("") == "d"`, true},
		{`object["spec"]["nodeName"] == "node-a"`, true},
		{`object.spec.replicas == 3 || object.data.v == "on"`, true},
		{`object.metadata.name.startsWith("a") && object.spec.containers.all(c, c.name != "x")`, true},
		{`object.exists(k, k == "status")`, false},
		{`size(object) > 3`, false},
		{`object.metadata == {"name": "d"}`, true},
	}
	for _, tt := range exprs {
		f, err := c.Compile(tt.expr)
		if err != nil {
			t.Fatalf("compile(%q): %v", tt.expr, err)
		}
		if (f.Reads() != nil) != tt.readsSome {
			t.Errorf("%s: reads %v, want some paths: %v", tt.expr, f.Reads(), tt.readsSome)
		}
		for _, obj := range objects {
			whole, err := f.Decode([]byte(obj), nil)
			if err != nil {
				t.Fatal(err)
			}
			wantOut, _, wantErr := f.prog.Eval(activation{object: whole})
			part, err := f.Decode([]byte(obj), f.Reads())
			if err != nil {
				t.Fatal(err)
			}
			gotOut, _, gotErr := f.prog.Eval(activation{object: part})
			if (wantErr != nil) != (gotErr != nil) || wantErr == nil && gotOut.Equal(wantOut) != types.True {
				t.Errorf("%s on %s: the whole object gives %v (%v), what it reads %v (%v)", tt.expr, obj, wantOut, wantErr, gotOut, gotErr)
			}
		}
	}
}
