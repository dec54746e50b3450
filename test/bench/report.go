package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Report is what a harness run measured, laid out for BENCHMARKS.md.
type Report struct {
	Sections []Section
	Targets  []Target
}

// Section is one scenario's results.
type Section struct {
	Title  string
	Intro  string // markdown: what was measured, and how
	Tables []Table
	Plots  []Plot
	Notes  []string // markdown: what the numbers say, caveats
}

// Table is a markdown table.
type Table struct {
	Caption string
	Header  []string
	Rows    [][]string
}

// Plot is a chart that tools/benchplot renders as a PNG. Each point is a
// median, with the least and greatest value of the runs as its error bar.
type Plot struct {
	File   string   `json:"file"` // PNG file name in the results directory
	Title  string   `json:"title"`
	X      string   `json:"x"`
	Y      string   `json:"y"`
	LogX   bool     `json:"logX,omitempty"`
	LogY   bool     `json:"logY,omitempty"`
	Series []Series `json:"series"`
}

// Series is one line of a Plot.
type Series struct {
	Name   string  `json:"name"`
	Points []Point `json:"points"`
}

// Point is a median and its spread at X.
type Point struct {
	X  float64 `json:"x"`
	Y  float64 `json:"y"`
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
}

func point(x float64, s Spread) Point { return Point{X: x, Y: s.Median, Lo: s.Min, Hi: s.Max} }

// Target is one of the targets and what was measured against it.
type Target struct {
	Name, Goal, Measured string
	Met                  bool
}

// WritePlots writes the plots' specification, for tools/benchplot.
func (r *Report) WritePlots(file string) error {
	var plots []Plot
	for _, s := range r.Sections {
		plots = append(plots, s.Plots...)
	}
	b, err := json.MarshalIndent(plots, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

// WriteMarkdown writes the sections and targets; plots are linked from
// plotDir, relative to the markdown file.
func (r *Report) WriteMarkdown(w io.Writer, plotDir string) error {
	var b strings.Builder
	if len(r.Targets) > 0 {
		b.WriteString("## Targets\n\n| Target | Goal | Measured (median) | Met |\n|---|---|---|---|\n")
		for _, t := range r.Targets {
			met := "no"
			if t.Met {
				met = "yes"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", t.Name, t.Goal, t.Measured, met)
		}
		b.WriteString("\n")
	}
	for _, s := range r.Sections {
		fmt.Fprintf(&b, "## %s\n\n", s.Title)
		if s.Intro != "" {
			b.WriteString(strings.TrimSpace(s.Intro) + "\n\n")
		}
		for _, t := range s.Tables {
			if t.Caption != "" {
				fmt.Fprintf(&b, "%s\n\n", t.Caption)
			}
			b.WriteString("| " + strings.Join(t.Header, " | ") + " |\n")
			b.WriteString("|" + strings.Repeat("---|", len(t.Header)) + "\n")
			for _, row := range t.Rows {
				b.WriteString("| " + strings.Join(row, " | ") + " |\n")
			}
			b.WriteString("\n")
		}
		for _, p := range s.Plots {
			fmt.Fprintf(&b, "![%s](%s)\n\n", p.Title, filepath.ToSlash(filepath.Join(plotDir, p.File)))
		}
		for _, n := range s.Notes {
			b.WriteString("- " + strings.TrimSpace(n) + "\n")
		}
		if len(s.Notes) > 0 {
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
