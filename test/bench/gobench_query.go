package bench

import (
	"fmt"
	"slices"
	"strings"
)

// The in-process benchmarks of the hub's query features, in package
// informerhub (selective_bench_test.go, filter_bench_test.go,
// projection_bench_test.go): their section of the report, and the targets
// they measure.
const (
	benchOneObjectEach = "BenchmarkOneObjectEach"
	benchNodeAgents    = "BenchmarkNodeAgents"
	benchFilter        = "BenchmarkFilter"
	benchProjection    = "BenchmarkProjection"

	// filterExpressions is the number of distinct filters (and label
	// selectors) BenchmarkFilter's subscribers share.
	filterExpressions = 10
)

// Units the query benchmarks report beside Go's own.
const (
	unitCPUPerChange = "cpu-ns/change"
	unitDecodes      = "decodes/change"
	unitBytes        = "bytes/delivery"
)

func isQueryBenchmark(name string) bool {
	family, _, _ := strings.Cut(name, "/")
	return slices.Contains([]string{benchOneObjectEach, benchNodeAgents, benchFilter, benchProjection}, family)
}

// addQueryBenchmarks adds the section of the query benchmarks, and the
// targets they measure, with ratios taken run by run (the benchmarks'
// -count runs, in order).
func (r *Report) addQueryBenchmarks(benchmarks []*goBenchmark, command string) {
	byFamily := map[string][]*goBenchmark{}
	for _, b := range benchmarks {
		family, _, _ := strings.Cut(b.name, "/")
		byFamily[family] = append(byFamily[family], b)
	}
	sec := Section{
		Title: "10. Indexed dispatch, filters and projection, in process",
		Intro: "Go benchmarks of package informerhub (b.Loop, ReportAllocs), run with `" + command + "`: the hub in process on the fake cluster, encoding events as the server does (server.EncodeEvent), without bookmarks. Each iteration is one change, received by every subscriber it concerns before the next. " +
			"cpu-ns/change is the process's CPU time (user and system, every goroutine's) per change: besides the hub's dispatch, filters, projection and encoding, it holds what every variant shares, the fake API server, the informer encoding each typed object to JSON (where the hub process decodes the API server's JSON) and the subscribers' Next. " +
			"groups/change counts the subscriber groups the dispatcher matched each change against; decodes/change the objects decoded for CEL per change; bytes/delivery the WatchResponse message each delivery sends. " +
			"`BenchmarkOneObjectEach`: N subscribers, each on metadata.name of its own ConfigMap (4 KiB), changes round the objects. `BenchmarkNodeAgents`: N subscribers, each on spec.nodeName of its own node, over 2N pods of about 6 KB (with managedFields), changes round the pods. " +
			fmt.Sprintf("`BenchmarkFilter`: 1,000 subscribers sharing %d label selectors (shard=s0 …), or %d CEL filters that select the same pods (object.metadata.labels[\"shard\"] == \"s0\" …), over 100 pods of about 6 KB; each change concerns 100 subscribers in both. ", filterExpressions, filterExpressions) +
			"`BenchmarkProjection`: 1,000 subscribers of 100 pods of about 6 KB, whole or projected to metadata.labels and status.phase; every change reaches all of them. " +
			"Every value is the median of the runs, with the least and greatest in brackets; ratios are taken run by run, then summarised. Here the hub does not write to gRPC streams: scenarios 7 to 9 measure the same cases end to end.",
	}

	for _, family := range []struct{ name, title string }{{benchOneObjectEach, "One object each"}, {benchNodeAgents, "Node agents"}} {
		bs := byFamily[family.name]
		if len(bs) == 0 {
			continue
		}
		table := benchTable(bs)
		table.Caption = family.title + ":"
		sec.Tables = append(sec.Tables, table)
		base := slices.MinFunc(bs, func(a, b *goBenchmark) int { return int(subscribersOf(a) - subscribersOf(b)) })
		largest := slices.MaxFunc(bs, func(a, b *goBenchmark) int { return int(subscribersOf(a) - subscribersOf(b)) })
		ratios := Table{Header: []string{"subscribers", fmt.Sprintf("cpu-ns/change ÷ at %.0f", subscribersOf(base)), "groups/change"}}
		var worst Spread
		for _, b := range bs {
			if b == base {
				continue
			}
			rel := pairRatio(b, base, unitCPUPerChange)
			ratios.Rows = append(ratios.Rows, []string{fmt.Sprintf("%.0f", subscribersOf(b)), rel.format(ratio), spreadOf(b.metrics["groups/change"]).format(number)})
			if b == largest {
				worst = rel
			}
		}
		if len(ratios.Rows) == 0 {
			continue
		}
		sec.Tables = append(sec.Tables, ratios)
		r.Targets = append(r.Targets, Target{
			Name:     family.title + ": CPU per change (in process)",
			Goal:     fmt.Sprintf("at %.0f subscribers ≤ 1.5× at %.0f", subscribersOf(largest), subscribersOf(base)),
			Measured: worst.format(ratio), Met: worst.Median <= 1.5,
		})
	}

	if bs := byFamily[benchFilter]; len(bs) > 0 {
		table := benchTable(bs)
		table.Caption = "Filters:"
		sec.Tables = append(sec.Tables, table)
		cel, labels := findSuffix(bs, "/selector=cel"), findSuffix(bs, "/selector=labels")
		if cel != nil && labels != nil {
			rel := pairRatio(cel, labels, unitCPUPerChange)
			decodes := spreadOf(cel.metrics[unitDecodes])
			sec.Tables = append(sec.Tables, Table{
				Header: []string{"subscribers", "cpu-ns/change: CEL ÷ labels", "decodes/change with CEL"},
				Rows:   [][]string{{fmt.Sprintf("%.0f", subscribersOf(cel)), rel.format(ratio), decodes.format(number)}},
			})
			r.Targets = append(r.Targets, Target{
				Name:     fmt.Sprintf("Filters: %.0f subscribers sharing %d CEL expressions (in process)", subscribersOf(cel), filterExpressions),
				Goal:     "≤ 2× the CPU of label selectors of the same selectivity; 1 decode per change",
				Measured: fmt.Sprintf("%s the CPU; decodes/change %s", rel.format(ratio), decodes.format(number)),
				Met:      rel.Median <= 2 && decodes.Median <= 1,
			})
		}
	}

	if bs := byFamily[benchProjection]; len(bs) > 0 {
		table := benchTable(bs)
		table.Caption = "Projection:"
		sec.Tables = append(sec.Tables, table)
		projected, whole := findSuffix(bs, "/objects=projected"), findSuffix(bs, "/objects=whole")
		if projected != nil && whole != nil {
			bytes := pairRatio(projected, whole, unitBytes)
			cpu := pairRatio(projected, whole, unitCPUPerChange)
			sec.Tables = append(sec.Tables, Table{
				Header: []string{"subscribers", "bytes/delivery: projected ÷ whole", "cpu-ns/change: projected ÷ whole"},
				Rows:   [][]string{{fmt.Sprintf("%.0f", subscribersOf(projected)), bytes.format(percent1), cpu.format(ratio)}},
			})
			r.Targets = append(r.Targets, Target{
				Name:     "Projection to " + strings.Join(projectedFields, ", ") + " (in process: the hub's core, no gRPC writes)",
				Goal:     "bytes per delivery ≤ 10% of whole objects'; CPU ≤ the unprojected fan-out's",
				Measured: fmt.Sprintf("%s of the bytes; %s the CPU", bytes.format(percent1), cpu.format(ratio)),
				Met:      bytes.Median <= 0.10 && cpu.Median <= 1,
			})
		}
	}
	r.Sections = append(r.Sections, sec)
}

// subscribersOf reads N from a benchmark name's element "subscribers=N";
// 0 without one.
func subscribersOf(b *goBenchmark) float64 {
	for elem := range strings.SplitSeq(b.name, "/") {
		if v, ok := strings.CutPrefix(elem, "subscribers="); ok {
			return streamCount("=" + v)
		}
	}
	return 0
}

func findSuffix(bs []*goBenchmark, suffix string) *goBenchmark {
	for _, b := range bs {
		if strings.HasSuffix(b.name, suffix) {
			return b
		}
	}
	return nil
}

// pairRatio is the spread of a's unit ÷ b's, run by run.
func pairRatio(a, b *goBenchmark, unit string) Spread {
	var v []float64
	for i := range min(len(a.metrics[unit]), len(b.metrics[unit])) {
		v = append(v, a.metrics[unit][i]/b.metrics[unit][i])
	}
	return spreadOf(v)
}
