package dashboard

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "write the generated dashboard to the chart")

// committed is the dashboard the chart ships.
var committed = filepath.Join("..", "..", "charts", "informerhub", "files", "dashboard.json")

func TestTheCommittedDashboardIsGenerated(t *testing.T) {
	got, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(committed, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not what internal/dashboard makes: run `go test ./internal/dashboard -update` and commit it", committed)
	}
}

// The dashboard holds together: unique panel ids, panels within the
// grid and not overlapping, every panel with a description, a query and
// the data source variable, and every query selected by the variables.
func TestTheDashboardIsWellFormed(t *testing.T) {
	data, err := JSON()
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			ID          int
			Type, Title string
			Description string
			GridPos     struct{ H, W, X, Y int }
			Datasource  map[string]string
			Targets     []struct{ Expr, LegendFormat string }
		}
		Templating struct {
			List []struct{ Name, Query string }
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if g := p.GridPos; g.X < 0 || g.W <= 0 || g.X+g.W > 24 || g.H <= 0 {
			t.Errorf("panel %q at %+v is off the 24-column grid", p.Title, g)
		}
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Errorf("panels %q and %q overlap at %d,%d", other, p.Title, x, y)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Description == "" || len(p.Targets) == 0 || p.Datasource["uid"] != "${datasource}" {
			t.Errorf("panel %q: a description, queries and the data source variable, please", p.Title)
		}
		for _, target := range p.Targets {
			if !strings.Contains(target.Expr, `namespace="$namespace", job="$job", pod=~"$pod"`) {
				t.Errorf("panel %q: %s is not selected by the variables namespace, job and pod", p.Title, target.Expr)
			}
			if target.LegendFormat == "" {
				t.Errorf("panel %q: %s has no legend", p.Title, target.Expr)
			}
		}
	}
	var names []string
	for _, v := range d.Templating.List {
		names = append(names, v.Name)
	}
	if got, want := strings.Join(names, ","), "datasource,namespace,job,pod,resource"; got != want {
		t.Errorf("variables %s, want %s", got, want)
	}
}
