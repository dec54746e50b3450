// Command benchplot renders the plots of a benchmark report (the
// plots.json that cmd/hubbench writes) as PNG files beside it. It is a
// module of its own so that the plotting library stays out of the server's
// dependencies.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// chart mirrors test/bench.Plot.
type chart struct {
	File   string `json:"file"`
	Title  string `json:"title"`
	X      string `json:"x"`
	Y      string `json:"y"`
	LogX   bool   `json:"logX"`
	LogY   bool   `json:"logY"`
	Series []struct {
		Name   string `json:"name"`
		Points []struct {
			X, Y, Lo, Hi float64
		} `json:"points"`
	} `json:"series"`
}

func main() {
	spec := flag.String("plots", "test/bench/results/plots.json", "the plots to render; PNGs go beside it")
	flag.Parse()
	b, err := os.ReadFile(*spec)
	if err != nil {
		log.Fatal(err)
	}
	var charts []chart
	if err := json.Unmarshal(b, &charts); err != nil {
		log.Fatalf("%s: %v", *spec, err)
	}
	for _, c := range charts {
		if err := render(c, filepath.Join(filepath.Dir(*spec), c.File)); err != nil {
			log.Fatalf("%s: %v", c.File, err)
		}
	}
}

func render(c chart, file string) error {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = c.Title, c.X, c.Y
	p.Legend.Top = true
	if c.LogX {
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	if c.LogY {
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	}
	p.Add(plotter.NewGrid())
	for i, s := range c.Series {
		var points plotter.XYs
		var bars plotter.YErrors
		for _, pt := range s.Points {
			if (c.LogX && pt.X <= 0) || (c.LogY && pt.Y <= 0) {
				continue // a log scale cannot show it
			}
			points = append(points, plotter.XY{X: pt.X, Y: pt.Y})
			bars = append(bars, struct{ Low, High float64 }{pt.Y - pt.Lo, pt.Hi - pt.Y})
		}
		if len(points) == 0 {
			continue
		}
		line, marks, err := plotter.NewLinePoints(points)
		if err != nil {
			return err
		}
		line.Color, marks.Color = plotutil.Color(i), plotutil.Color(i)
		marks.Shape = plotutil.Shape(i)
		errs, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{points, bars})
		if err != nil {
			return err
		}
		errs.Color = plotutil.Color(i)
		p.Add(line, marks, errs)
		p.Legend.Add(s.Name, line, marks)
	}
	if err := p.Save(6*vg.Inch, 4*vg.Inch, file); err != nil {
		return fmt.Errorf("saving: %w", err)
	}
	return nil
}
