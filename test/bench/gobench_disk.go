package bench

import (
	"fmt"
	"strings"
)

// benchDiskHistory is the in-process benchmark of the history on disk
// (informerhub/durable_bench_test.go).
const benchDiskHistory = "BenchmarkDiskHistory"

func isDiskBenchmark(name string) bool { return strings.HasPrefix(name, benchDiskHistory+"/") }

// addDiskBenchmarks adds the section of BenchmarkDiskHistory and the
// targets it measures.
func (r *Report) addDiskBenchmarks(benchmarks []*goBenchmark, command string) {
	r.Sections = append(r.Sections, Section{
		Title:  "13. The history on disk, in process",
		Intro:  "BenchmarkDiskHistory, run with `" + command + "`, on ConfigMaps of about 4 KiB (1,000 names, each change a MODIFIED with its previous state). append: 200,000 changes through the informer's handler until the writer has synced them all to disk, and the bytes their records take at rest (compressed). catch-up: a client 1,000,000 records behind reads them all from the disk through the subscription, with the Go heap before and at its largest during. startup: a hub over those 1,000,000 records serves a Watch. Median of the runs, least and greatest in brackets.",
		Tables: []Table{benchTable(benchmarks)},
	})
	metric := func(name, unit string) (Spread, bool) {
		b := find(benchmarks, benchDiskHistory+"/"+name)
		if b == nil || len(b.metrics[unit]) == 0 {
			return Spread{}, false
		}
		return spreadOf(b.metrics[unit]), true
	}
	if rate, ok := metric("append", "records/s"); ok {
		size, _ := metric("append", "disk-bytes/record")
		r.Targets = append(r.Targets, Target{Name: "Appending to the disk history (4 KiB objects)", Goal: "≥ 20,000 records/s, off the informer's lock",
			Measured: rate.format(perSecond) + "; " + size.format(count) + " bytes per record at rest", Met: rate.Median >= 20000})
	}
	if rate, ok := metric("catch-up", "events/s"); ok {
		before, _ := metric("catch-up", "heap-before-MiB")
		peak, _ := metric("catch-up", "heap-max-MiB")
		growth := peak.Median - before.Median
		r.Targets = append(r.Targets, Target{Name: "Catch-up from disk, 1,000,000 records behind", Goal: "≥ 50,000 events/s; memory flat (heap grows ≤ 32 MiB)",
			Measured: fmt.Sprintf("%s; heap %.0f MiB before, %.0f MiB at most during", rate.format(perSecond), before.Median, peak.Median),
			Met:      rate.Median >= 50000 && growth <= 32})
	}
	if startup, ok := metric("startup", "startup-ms"); ok {
		r.Targets = append(r.Targets, Target{Name: "Startup over 1,000,000 stored records", Goal: "serving within 5 s (no scan of the records)",
			Measured: startup.format(ms), Met: startup.Median <= 5000})
	}
}
