package selection

import (
	"strings"
	"testing"

	"github.com/informerhub/informerhub/informerhub/celfilter"
	"github.com/informerhub/informerhub/informerhub/internal/state"
)

func TestFilterResultsAreCachedOnObjects(t *testing.T) {
	c := testCompiler()
	o := &state.Object{JSON: `{"metadata":{"name":"a"}}`}
	var filters []*celfilter.Filter
	for i := range state.MaxCachedVerdicts + 2 {
		f, err := c.Compile(`object.metadata.name == "a" || ` + strings.Repeat("true && ", i) + `false`)
		if err != nil {
			t.Fatal(err)
		}
		filters = append(filters, f)
	}
	before := c.Counts().Decodes
	dc := &Evaluation{}
	dc.Share(filters) // as the feed does before dispatch
	for _, f := range filters {
		if !dc.Matches(f, o, nil).Match {
			t.Fatal("no match")
		}
	}
	if n := c.Counts().Decodes - before; n != 1 {
		t.Errorf("%d filters on one object decoded it %d times, want once", len(filters), n)
	}
	last := filters[len(filters)-1]
	before = c.Counts().Decodes
	if !(*Evaluation)(nil).Matches(last, o, nil).Match || c.Counts().Decodes != before {
		t.Error("the result of the last filter evaluated is not cached on the object")
	}
	if _, cached := o.CachedVerdict(filters[0].ID()); cached {
		t.Errorf("the object still caches the first of %d filters' results, past the %d it keeps", len(filters), state.MaxCachedVerdicts)
	}
}
