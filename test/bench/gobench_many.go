package bench

import (
	"fmt"
	"slices"
	"strings"
)

// The Go benchmarks of issue 27's features: WatchMany against Watch
// streams (package server), and shard subscribers and Count callers
// against their baselines (package informerhub); their section of the
// report, and the targets they measure.
const (
	benchWatchMany = "BenchmarkWatchMany"
	benchShards    = "BenchmarkShards"
	benchCount     = "BenchmarkCount"
)

func isManyBenchmark(name string) bool {
	family, _, _ := strings.Cut(name, "/")
	return slices.Contains([]string{benchWatchMany, benchShards, benchCount}, family)
}

// addManyBenchmarks adds the section of WatchMany, shards and Count, with
// ratios taken run by run.
func (r *Report) addManyBenchmarks(benchmarks []*goBenchmark, command string) {
	sec := Section{
		Title: "15. Several types on one stream, shards and counts",
		Intro: "Go benchmarks (b.Loop, ReportAllocs), run with `" + command + "`, each against its baseline measured in the same run. " +
			"`BenchmarkWatchMany` (package server, over loopback gRPC, as BenchmarkGRPCFanOut): 100 clients, each with one WatchMany of 10 resource types or 10 Watch streams of them; each iteration one 4 KiB change of each type, received by every client; deliveries/cpu-s counts the whole process. " +
			"`BenchmarkShards` (package informerhub, in process, as section 10): 1,000 pods of about 6 KB, changes round the pods, watched by 16 subscribers each on a sixteenth of the uid hash space, or by one unsharded subscriber: one delivery per change either way. " +
			"`BenchmarkCount` (in process): the CPU per change of a resource type with Count callers (1,000 callers over 10 distinct requests) against none. " +
			"Every value is the median of the runs, with the least and greatest in brackets.",
	}
	byFamily := map[string][]*goBenchmark{}
	for _, b := range benchmarks {
		family, _, _ := strings.Cut(b.name, "/")
		byFamily[family] = append(byFamily[family], b)
	}
	for _, family := range []string{benchWatchMany, benchShards, benchCount} {
		if bs := byFamily[family]; len(bs) > 0 {
			sec.Tables = append(sec.Tables, benchTable(bs))
		}
	}
	ratios := Table{Header: []string{"comparison", "ratio"}}
	watch, many := findSuffix(benchmarks, "/watch"), findSuffix(benchmarks, "/watchmany")
	if watch != nil && many != nil {
		// CPU per delivery of WatchMany ÷ Watch's = Watch's rate ÷ WatchMany's.
		rel := pairRatio(watch, many, "deliveries/cpu-s")
		ratios.Rows = append(ratios.Rows, []string{"WatchMany of 10 types ÷ 10 Watch streams: CPU per delivery", rel.format(ratio)})
		r.Targets = append(r.Targets, Target{Name: "WatchMany of 10 types against 10 Watch streams", Goal: "CPU per delivery ≤ 1.1×",
			Measured: rel.format(ratio), Met: rel.Median <= 1.1})
	}
	unsharded, sharded := findSuffix(benchmarks, benchShards+"/unsharded"), findSuffix(benchmarks, "/shards=16")
	if unsharded != nil && sharded != nil {
		rel := pairRatio(sharded, unsharded, unitCPUPerChange)
		groups := spreadOf(sharded.metrics["groups/change"])
		ratios.Rows = append(ratios.Rows, []string{"16 shard subscribers ÷ 1 unsharded: CPU per change", rel.format(ratio)})
		r.Targets = append(r.Targets, Target{Name: "16 shard subscribers against one unsharded (in process)", Goal: "CPU per change ≤ 1.2×; 1 group visited per change",
			Measured: fmt.Sprintf("%s the CPU; groups/change %s", rel.format(ratio), groups.format(number)), Met: rel.Median <= 1.2 && groups.Median <= 1})
	}
	none, counted := findSuffix(benchmarks, benchCount+"/callers=0"), findSuffix(benchmarks, "/callers=1000")
	if none != nil && counted != nil {
		rel := pairRatio(counted, none, unitCPUPerChange)
		ratios.Rows = append(ratios.Rows, []string{"1,000 Count callers over 10 requests ÷ none: CPU per change", rel.format(ratio)})
		r.Targets = append(r.Targets, Target{Name: "Count: 1,000 callers over 10 distinct requests (in process)", Goal: "CPU per change ≤ 1.5× without Count callers",
			Measured: rel.format(ratio), Met: rel.Median <= 1.5})
	}
	if len(ratios.Rows) > 0 {
		sec.Tables = append(sec.Tables, ratios)
	}
	r.Sections = append(r.Sections, sec)
}
