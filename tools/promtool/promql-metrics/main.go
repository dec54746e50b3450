// Command promql-metrics parses PromQL expressions with Prometheus' own
// parser and names the metrics each one reads, so that a test can check
// that the alerting rules and the dashboard of charts/informerhub read only
// metrics the hub exports.
//
// It reads a JSON array of expressions on stdin and writes a JSON array of
// results in the same order, each {"expr", "metrics"} (the metric names of
// its selectors, sorted and without duplicates) or {"expr", "error"} (why
// it does not parse, or a selector that names no metric). It exits 0 when
// it could read its input, whatever the expressions: the caller judges.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

type result struct {
	Expr    string   `json:"expr"`
	Metrics []string `json:"metrics,omitempty"`
	Error   string   `json:"error,omitempty"`
}

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fmt.Fprintln(os.Stderr, "promql-metrics: reading a JSON array of expressions on stdin:", err)
		os.Exit(2)
	}
	p := parser.NewParser(parser.Options{})
	results := make([]result, 0, len(exprs))
	for _, e := range exprs {
		results = append(results, inspect(p, e))
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(results); err != nil {
		fmt.Fprintln(os.Stderr, "promql-metrics:", err)
		os.Exit(1)
	}
}

// inspect parses expr and collects the metric names of its selectors.
func inspect(p parser.Parser, expr string) result {
	r := result{Expr: expr}
	ast, err := p.ParseExpr(expr)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	parser.Inspect(ast, func(node parser.Node, _ []parser.Node) error {
		var matchers []*labels.Matcher
		switch n := node.(type) {
		case *parser.VectorSelector:
			matchers = n.LabelMatchers
		case *parser.MatrixSelector:
			return nil // its VectorSelector is visited next
		default:
			return nil
		}
		name := ""
		for _, m := range matchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		if name == "" && r.Error == "" {
			// {__name__=~"..."} or {job="x"}: which metrics it reads
			// depends on the server's series, so no test can tell.
			r.Error = fmt.Sprintf("a selector names no metric exactly: %s", node)
		}
		if name != "" {
			r.Metrics = append(r.Metrics, name)
		}
		return nil
	})
	slices.Sort(r.Metrics)
	r.Metrics = slices.Compact(r.Metrics)
	return r
}
