package conformance

import (
	"context"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/test/checker"
)

// countProbe is a Count: a probe's selector, grouped by groupBy, and the
// oracle's group of an object.
type countProbe struct {
	row     row
	probe   probe
	groupBy string
	group   func(checker.Event) string // nil: the total only
}

// countProbes are the probes of the rows with a Count cell, counted in
// total, and a grouping of each kind the proto names.
func countProbes() []countProbe {
	var out []countProbe
	for _, p := range probesFor(colCount) {
		out = append(out, countProbe{row: p.row, probe: p})
	}
	tokenProbe := probes[slicesIndex(rowToken)]
	out = append(out,
		countProbe{row: rowGroupBy, probe: tokenProbe, groupBy: "label:app", group: func(e checker.Event) string { return e.Labels["app"] }},
		countProbe{row: rowGroupBy, probe: tokenProbe, groupBy: "namespace", group: func(e checker.Event) string { return e.Namespace }},
		countProbe{row: rowGroupBy, probe: tokenProbe, groupBy: "data.n", group: func(e checker.Event) string {
			v, _ := at(decoded(e), "data", "n")
			s, _ := v.(string)
			return s
		}},
	)
	return out
}

func slicesIndex(r row) int {
	for i, p := range probes {
		if p.row == r {
			return i
		}
	}
	panic("no probe of " + string(r))
}

// countRun reads a Count in the background, checking each counts it gets
// against the reference's state at their resourceVersion.
type countRun struct {
	cp  countProbe
	s   *scenario
	mu  sync.Mutex // guards the fields below
	got []*informerhubv1.CountResponse
	err error
}

func (c *countRun) read(stream interface {
	Recv() (*informerhubv1.CountResponse, error)
}) {
	for {
		resp, err := stream.Recv()
		c.mu.Lock()
		if err != nil {
			c.err = err
			c.mu.Unlock()
			return
		}
		c.got = append(c.got, resp)
		c.mu.Unlock()
	}
}

// want is what the reference counts at resourceVersion.
func (c *countRun) want(t *testing.T, resourceVersion string) *informerhubv1.CountResponse {
	t.Helper()
	ref := c.s.refs[c.cp.probe.kind]
	v, _ := strconv.ParseUint(resourceVersion, 10, 64)
	c.s.reach(t, c.cp.probe.kind, v)
	state, err := ref.State(resourceVersion, c.cp.probe.options(c.s))
	if err != nil {
		t.Fatal(err)
	}
	want := &informerhubv1.CountResponse{Total: uint64(len(state)), ResourceVersion: resourceVersion}
	if c.cp.group != nil {
		want.Groups = map[string]uint64{}
		for _, e := range state {
			want.Groups[c.cp.group(e)]++
		}
	}
	return want
}

// TestCount: a Count of each selector, and grouped each way, through the
// churn: every counts it gets are those of the reference's state at their
// resourceVersion, and the last ones those of the state at the last
// change.
func TestCount(t *testing.T) {
	s := newScenario(t, smallPayload)
	cfg := hubConfig()
	cfg.CountInterval = 20 * time.Millisecond
	h := startHub(t, cluster.Config, cfg)
	var runs []*countRun
	for _, cp := range countProbes() {
		c := &countRun{cp: cp, s: s}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		stream, err := grpcDialer(t, h.Addr).Count(ctx, &informerhubv1.CountRequest{Selector: cp.probe.request(s).GetSelector(), GroupBy: cp.groupBy})
		if err != nil {
			t.Fatalf("%s: Count: %v", cp.row, err)
		}
		go c.read(stream)
		runs = append(runs, c)
	}
	s.churn(3)
	s.settle()
	for _, c := range runs {
		t.Run(string(c.cp.row)+"/"+c.cp.groupBy, func(t *testing.T) {
			passIfOK(t, c.cp.row, colCount)
			final := c.want(t, strconv.FormatUint(s.lastRV[c.cp.probe.kind], 10))
			eventually(t, "the counts of the last change", func() bool {
				c.mu.Lock()
				defer c.mu.Unlock()
				if c.err != nil {
					t.Fatalf("the Count ended: %v", c.err)
				}
				if len(c.got) == 0 {
					return false
				}
				last := c.got[len(c.got)-1]
				return last.GetTotal() == final.GetTotal() && maps.Equal(last.GetGroups(), final.GetGroups())
			})
			c.mu.Lock()
			got := c.got
			c.mu.Unlock()
			for _, counts := range got {
				want := c.want(t, counts.GetResourceVersion())
				if counts.GetTotal() != want.GetTotal() || !maps.Equal(counts.GetGroups(), want.GetGroups()) {
					t.Errorf("counts at resourceVersion %s: %d %v, want %d %v", counts.GetResourceVersion(),
						counts.GetTotal(), counts.GetGroups(), want.GetTotal(), want.GetGroups())
				}
			}
		})
	}
}
