package informerhub

import (
	"errors"
	"fmt"
	"regexp/syntax"
	"strings"
	"sync/atomic"
	"testing"
	"unicode/utf8"

	"github.com/google/cel-go/common/types"
)

func testFilterCompiler(cfg Config) *filterCompiler {
	cfg.setDefaults()
	return newFilterCompiler(&cfg)
}

func TestFilterCompileErrors(t *testing.T) {
	c := testFilterCompiler(Config{})
	tests := []struct {
		expr string
		want string // in the reason
	}{
		{"foo == 1", "ERROR: <input>:1:1: undeclared reference to 'foo'"},
		{"object.spec.replicas ==", "ERROR: <input>:1:24: Syntax error"},
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
		_, err := c.compile(tt.expr)
		var reqErr *RequestError
		if !errors.As(err, &reqErr) || reqErr.Field != FieldFilter || !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("compile(%q) = %v, want a RequestError on %s", tt.expr, err, FieldFilter)
			continue
		}
		if !strings.Contains(reqErr.Reason, tt.want) {
			t.Errorf("compile(%q): reason %q does not say %q", tt.expr, reqErr.Reason, tt.want)
		}
	}
}

func TestIdenticalExpressionsCompileOnce(t *testing.T) {
	c := testFilterCompiler(Config{})
	a, err := c.compile(`object.metadata.name == "a"`)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.compile(`object.metadata.name == "a"`)
	if err != nil || a != b {
		t.Errorf("the same expression compiled twice: %p and %p (%v)", a, b, err)
	}
	_, err1 := c.compile("nope")
	_, err2 := c.compile("nope")
	if err1 == nil || err1 != err2 {
		t.Errorf("an expression that does not compile: %v, then %v; want the same error, cached", err1, err2)
	}
}

func TestFilterEvaluation(t *testing.T) {
	c := testFilterCompiler(Config{})
	o := &object{json: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","labels":{"app":"web"}},"spec":{"replicas":3,"containers":[{"image":"nginx:1"},{"image":"envoy"}]},"status":{"phase":"Running"}}`}
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
		f, err := c.compile(tt.expr)
		if err != nil {
			t.Fatalf("compile(%q): %v", tt.expr, err)
		}
		if got := f.matches(o, nil, nil); got != tt.want {
			t.Errorf("%s = %v, want %v", tt.expr, got, tt.want)
		}
	}
}

func TestFilterRuntimeCostLimit(t *testing.T) {
	var items []string
	for range 200 {
		items = append(items, `{"image":"busybox"}`)
	}
	o := &object{json: `{"metadata":{"name":"a"},"spec":{"containers":[` + strings.Join(items, ",") + `]}}`}
	const expr = `object.spec.containers.exists(c, c.image.startsWith("nginx")) || true`
	for _, tt := range []struct {
		maxCost uint64
		want    bool
	}{{maxCost: 100, want: false}, {maxCost: DefaultMaxFilterCost, want: true}} {
		c := testFilterCompiler(Config{MaxFilterCost: tt.maxCost})
		f, err := c.compile(expr)
		if err != nil {
			t.Fatal(err)
		}
		var errs atomic.Uint64
		if got := f.matches(o, nil, &errs); got != tt.want {
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
	o := &object{json: `{"metadata":{"name":"` + name + `"}}`}
	c := testFilterCompiler(Config{MaxFilterCost: 1000})
	// 26 per unit of pattern over 253 bytes: 12 characters cost 78, its
	// hundreds of instructions more than 1000.
	for _, expr := range []string{
		`object.metadata.name.matches("(?:a?){100}b")`,
		`object.metadata.name.matches("(?:a?){100}b") || true`,
		`object.metadata.name.find("(?:a?){100}b") == "" || true`,
		`object.metadata.name.findAll("(?:a?){100}b", 1).size() == 0 || true`,
	} {
		f, err := c.compile(expr)
		if err != nil {
			t.Fatalf("compile(%q): %v", expr, err)
		}
		ev := &evaluation{}
		runs := regexRuns.Load()
		if f.matches(o, ev, nil) || len(ev.costly) != 1 {
			t.Errorf("%s: selected, or %d costly filters; want it stopped as costly", expr, len(ev.costly))
		}
		if n := regexRuns.Load() - runs; n != 0 {
			t.Errorf("%s: %d regular expressions ran; want none to", expr, n)
		}
	}
	// The same length of pattern, as many instructions: runs.
	f, err := c.compile(`object.metadata.name.matches("^a+$|^b+$|^c+$")`)
	if err != nil {
		t.Fatal(err)
	}
	ev := &evaluation{}
	runs := regexRuns.Load()
	if !f.matches(o, ev, nil) || len(ev.costly) != 0 || regexRuns.Load() != runs+1 {
		t.Errorf("a cheap pattern: not selected, or %d costly filters, or %d runs", len(ev.costly), regexRuns.Load()-runs)
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

func TestFilterResultsAreCachedOnObjects(t *testing.T) {
	c := testFilterCompiler(Config{})
	o := &object{json: `{"metadata":{"name":"a"}}`}
	var filters []*filter
	for i := range maxCachedFilterResults + 2 {
		f, err := c.compile(`object.metadata.name == "a" || ` + strings.Repeat("true && ", i) + `false`)
		if err != nil {
			t.Fatal(err)
		}
		filters = append(filters, f)
	}
	before := decodes.Load()
	dc := &evaluation{}
	dc.share(filters) // as the feed does before dispatch
	for _, f := range filters {
		if !f.matches(o, dc, nil) {
			t.Fatal("no match")
		}
	}
	if n := decodes.Load() - before; n != 1 {
		t.Errorf("%d filters on one object decoded it %d times, want once", len(filters), n)
	}
	last := filters[len(filters)-1]
	before = decodes.Load()
	if !last.matches(o, nil, nil) || decodes.Load() != before {
		t.Error("the result of the last filter evaluated is not cached on the object")
	}
	if n := len(*o.filters.Load()); n != maxCachedFilterResults {
		t.Errorf("the object caches %d results, want at most %d", n, maxCachedFilterResults)
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
	c := testFilterCompiler(Config{})
	o := &object{json: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-1","labels":{"app":"web","tier":"a"}},"spec":{"containers":[{"name":"a","image":"nginx"},{"name":"b","image":"envoy"}]},"status":{"phase":"Running"}}`}
	f.Fuzz(func(t *testing.T, expr string) {
		if len(expr) > DefaultMaxFilterLength {
			return
		}
		flt, err := c.compile(expr)
		if err != nil {
			return
		}
		var errs atomic.Uint64
		flt.matches(o, nil, &errs)
	})
}

// TestFilterCacheIsBounded checks that the compiled expressions kept for
// reuse stay within their bounds of entries and bytes, however many
// distinct ones are asked for.
func TestFilterCacheIsBounded(t *testing.T) {
	c := testFilterCompiler(Config{})
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
		c.compile(fmt.Sprintf(`%sobject.metadata.name == "%d"`, long, i))
	}
	check("long expressions")
	// Short ones, that of entries; refused ones count too, by their reason.
	for i := range filterCacheEntries + 100 {
		expr := fmt.Sprintf(`object.metadata.name == "%d"`, i)
		if i%3 == 0 {
			expr += " +"
		}
		c.compile(expr)
	}
	check("short expressions")
}

// TestFilterReadsDecideAsTheWholeObject checks that the object projected on
// what a filter reads gives every expression the result the whole object
// gives, errors included, on objects that have and lack what it reads.
func TestFilterReadsDecideAsTheWholeObject(t *testing.T) {
	c := testFilterCompiler(Config{})
	objects := []string{
		podJSON,
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
		f, err := c.compile(tt.expr)
		if err != nil {
			t.Fatalf("compile(%q): %v", tt.expr, err)
		}
		if (f.reads != nil) != tt.readsSome {
			t.Errorf("%s: reads %v, want some paths: %v", tt.expr, f.reads, tt.readsSome)
		}
		for _, obj := range objects {
			whole, err := (*evaluation)(nil).decodeWhole(&object{json: obj})
			if err != nil {
				t.Fatal(err)
			}
			wantOut, _, wantErr := f.prog.Eval(activation{object: whole})
			part, err := (*evaluation)(nil).value(&object{json: obj}, f)
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

// TestTruncateKeepsCharactersWhole checks that a shortened reason stays
// valid UTF-8, which a gRPC status message must be.
func TestTruncateKeepsCharactersWhole(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc..."},
		{"ab€cd", 3, "ab..."}, // € is three bytes: not cut through
		{"ab€cd", 5, "ab€..."},
		{"€€", 1, "..."},
	} {
		got := truncateTo(tc.in, tc.max)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("truncateTo(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
