package bench

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// goBenchmark is one Go benchmark's results over its runs (-count).
type goBenchmark struct {
	name    string               // without the -GOMAXPROCS suffix
	metrics map[string][]float64 // unit → value of each run
	units   []string             // in the order the output gives them
}

var gomaxprocsSuffix = regexp.MustCompile(`-\d+$`)

// parseGoBench reads `go test -bench` output.
func parseGoBench(r io.Reader) ([]*goBenchmark, error) {
	byName := map[string]*goBenchmark{}
	var order []*goBenchmark
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") || len(fields)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			continue // not a result line
		}
		name := gomaxprocsSuffix.ReplaceAllString(fields[0], "")
		b := byName[name]
		if b == nil {
			b = &goBenchmark{name: name, metrics: map[string][]float64{}}
			byName[name] = b
			order = append(order, b)
		}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("benchmark line %q: %w", sc.Text(), err)
			}
			unit := fields[i+1]
			if _, ok := b.metrics[unit]; !ok {
				b.units = append(b.units, unit)
			}
			b.metrics[unit] = append(b.metrics[unit], v)
		}
	}
	return order, sc.Err()
}

// AddGoBenchmarks turns `go test -bench` output into the report's sections
// on the in-process fan-out core, on the query features (see
// addQueryBenchmarks), on the disk history (addDiskBenchmarks) and on
// WatchMany, shards and Count (addManyBenchmarks), and the targets they
// measure.
func (r *Report) AddGoBenchmarks(output io.Reader, command string) error {
	all, err := parseGoBench(output)
	if err != nil {
		return err
	}
	if len(all) == 0 {
		return fmt.Errorf("no benchmark results in the output of %s", command)
	}
	var benchmarks, query, disk, many []*goBenchmark
	for _, b := range all {
		switch {
		case isManyBenchmark(b.name):
			many = append(many, b)
		case isQueryBenchmark(b.name):
			query = append(query, b)
		case isDiskBenchmark(b.name):
			disk = append(disk, b)
		default:
			benchmarks = append(benchmarks, b)
		}
	}
	if len(query) > 0 {
		r.addQueryBenchmarks(query, command)
	}
	if len(disk) > 0 {
		r.addDiskBenchmarks(disk, command)
	}
	if len(many) > 0 {
		r.addManyBenchmarks(many, command)
	}
	if len(benchmarks) == 0 {
		return nil
	}
	sec := Section{
		Title:  "2. Fan-out core and the gRPC limit",
		Intro:  "Go benchmarks (b.Loop, ReportAllocs), run with `" + command + "`. Every value is the median of the runs, with the least and greatest in brackets.",
		Tables: []Table{benchTable(benchmarks)},
	}

	// The hub against the bare gRPC limit, stream count by stream count.
	const rate = "deliveries/cpu-s"
	fractions := Table{Header: []string{"streams", "hub deliveries/CPU-s", "limit deliveries/CPU-s", "hub ÷ limit",
		"hub writes per connection per change", "limit writes per connection per change", "hub p50 / p99", "limit p50 / p99"}}
	var hubSeries, limitSeries Series
	hubSeries.Name, limitSeries.Name = "hub", "bare gRPC limit"
	worst := Spread{Median: 1e9}
	for _, b := range benchmarks {
		// Sub-benchmarks streams=N/hub and streams=N/limit.
		base, ok := strings.CutSuffix(b.name, "/hub")
		if !ok {
			continue
		}
		limit := find(benchmarks, base+"/limit")
		if limit == nil || len(b.metrics[rate]) == 0 || len(limit.metrics[rate]) == 0 {
			continue
		}
		streams := base[strings.LastIndexByte(base, '/')+1:]
		n := len(b.metrics[rate])
		var f []float64
		for i := range min(n, len(limit.metrics[rate])) {
			f = append(f, b.metrics[rate][i]/limit.metrics[rate][i])
		}
		fs := spreadOf(f)
		x := streamCount(streams)
		// One stream is not a fan-out: the change's own cost (the informer,
		// the encoding) is all the hub's there, and none of the limit's.
		if x >= 100 && fs.Median < worst.Median {
			worst = fs
		}
		fractions.Rows = append(fractions.Rows, []string{streams, spreadOf(b.metrics[rate]).format(number), spreadOf(limit.metrics[rate]).format(number), fs.format(percent),
			writesPerConnection(b, x), writesPerConnection(limit, x), latencies(b), latencies(limit)})
		hubSeries.Points = append(hubSeries.Points, point(x, spreadOf(b.metrics[rate])))
		limitSeries.Points = append(limitSeries.Points, point(x, spreadOf(limit.metrics[rate])))
	}
	if len(fractions.Rows) > 0 {
		sec.Tables = append(sec.Tables, fractions)
		sec.Plots = append(sec.Plots, Plot{File: "grpc-limit.png", Title: "Deliveries per CPU-second over loopback gRPC", X: "streams", Y: "deliveries/CPU-s", LogX: true, Series: []Series{hubSeries, limitSeries}})
		r.Targets = append(r.Targets, Target{Name: "Fan-out over gRPC", Goal: "above the bare-gRPC limit (its own writes, one per delivery)", Measured: worst.format(percent) + " of the limit's deliveries/CPU-s at worst, 100 to 10,000 streams", Met: worst.Median >= 1})
	}
	r.Sections = append(r.Sections, sec)
	return nil
}

// grpcBenchConns is BenchmarkGRPCFanOut's maxBenchConns: its streams
// spread over at most this many connections.
const grpcBenchConns = 16

// writesPerConnection is a BenchmarkGRPCFanOut variant's server writes per
// connection per change, from its syscalls/delivery at streams streams.
func writesPerConnection(b *goBenchmark, streams float64) string {
	v := b.metrics["syscalls/delivery"]
	if len(v) == 0 {
		return "–"
	}
	perConn := make([]float64, len(v))
	for i, x := range v {
		perConn[i] = x * streams / min(streams, grpcBenchConns)
	}
	return spreadOf(perConn).format(func(f float64) string { return fmt.Sprintf("%.2f", f) })
}

// latencies is a BenchmarkGRPCFanOut variant's p50 and p99, change to
// receipt.
func latencies(b *goBenchmark) string {
	p50, p99 := b.metrics["p50-µs"], b.metrics["p99-µs"]
	if len(p50) == 0 || len(p99) == 0 {
		return "–"
	}
	return spreadOf(p50).format(microseconds) + " / " + spreadOf(p99).format(microseconds)
}

func microseconds(v float64) string { return fmt.Sprintf("%.2f ms", v/1000) }

// benchTable is a table of benchmarks with every unit they report.
func benchTable(benchmarks []*goBenchmark) Table {
	var units []string
	for _, b := range benchmarks {
		for _, u := range b.units {
			if !slices.Contains(units, u) {
				units = append(units, u)
			}
		}
	}
	table := Table{Header: append([]string{"benchmark"}, units...)}
	for _, b := range benchmarks {
		row := []string{"`" + b.name + "`"}
		for _, u := range units {
			row = append(row, spreadOf(b.metrics[u]).format(number))
		}
		table.Rows = append(table.Rows, row)
	}
	return table
}

func find(bs []*goBenchmark, name string) *goBenchmark {
	for _, b := range bs {
		if b.name == name {
			return b
		}
	}
	return nil
}

// streamCount reads N from a sub-benchmark name such as "streams=N".
func streamCount(s string) float64 {
	_, v, _ := strings.Cut(s, "=")
	n, _ := strconv.ParseFloat(v, 64)
	return n
}

func number(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v == float64(int64(v)):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}
