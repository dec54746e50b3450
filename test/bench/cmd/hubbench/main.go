// Command hubbench runs informerhub's benchmark harness (package
// test/bench) and writes BENCHMARKS.md, with the plots' specification for
// tools/benchplot and the hub's profiles beside it. `make bench` runs it.
package main

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/informerhub/informerhub/test/bench"
)

func main() {
	var (
		hubBinary = flag.String("hub", "bin/informerhub", "the informerhub binary to measure")
		results   = flag.String("results", "test/bench/results", "directory for plots, profiles and raw results")
		markdown  = flag.String("markdown", "BENCHMARKS.md", "report to write")
		goBench   = flag.String("go-bench", "", "file with `go test -bench` output of the in-process benchmarks, to include")
		goCommand = flag.String("go-bench-command", "", "the command that produced -go-bench, for the report")
		notes     = flag.String("notes", "", "markdown file to append to the report as is")
		runs      = flag.Int("runs", 3, "runs of every measurement")
		smoke     = flag.Bool("smoke", false, "tiny sizes: check that the harness works, in seconds")
		only      = flag.String("only", "", "run only the scenario of this name (fan-out, slow subscribers, relist, streams, export, ...), to compare binaries by hand")
		streams   = flag.Int("streams", 0, "the streams scenario's streams, instead of its size's")
		conns     = flag.Int("stream-connections", 0, "the streams scenario's connections, instead of its size's")
		checkPage = flag.Int("check-page-size", 0, "the consistency check scenario's objects per LIST page (the hub's --consistency-check-page-size), instead of the hub's default")
		checkObjs = flag.Int("check-objects", 0, "the consistency check scenario's one size, instead of its sizes")
	)
	flag.Parse()
	opts := bench.FullOptions()
	if *smoke {
		opts = bench.SmokeOptions()
	}
	opts.Runs = *runs
	if *streams > 0 {
		opts.Streams = *streams
	}
	if *conns > 0 {
		opts.StreamConnections = *conns
	}
	if *checkPage > 0 {
		opts.CheckPageSize = *checkPage
	}
	if *checkObjs > 0 {
		opts.CheckObjects = []int{*checkObjs}
	}
	opts.Only = *only
	opts.ProfileDir = filepath.Join(*results, "pprof")
	opts.Log = log.Printf

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts, *hubBinary, *results, *markdown, *goBench, *goCommand, *notes); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, opts bench.Options, hubBinary, results, markdown, goBench, goCommand, notes string) error {
	if err := os.MkdirAll(results, 0o755); err != nil {
		return err
	}
	started := time.Now()
	env, err := bench.StartEnv(hubBinary)
	if err != nil {
		return err
	}
	report, err := bench.Run(ctx, env, opts)
	if stopErr := env.Stop(); err == nil {
		err = stopErr
	}
	if err != nil {
		return err
	}
	if goBench != "" {
		out, err := os.ReadFile(goBench)
		if err != nil {
			return err
		}
		if err := report.AddGoBenchmarks(bytes.NewReader(out), goCommand); err != nil {
			return err
		}
	}
	// Scenarios in the order of their numbers, whoever measured them.
	slices.SortStableFunc(report.Sections, func(a, b bench.Section) int { return cmp.Compare(sectionNumber(a.Title), sectionNumber(b.Title)) })
	if err := report.WritePlots(filepath.Join(results, "plots.json")); err != nil {
		return err
	}

	var md bytes.Buffer
	fmt.Fprintf(&md, "# informerhub benchmarks\n\n")
	fmt.Fprintf(&md, "Written by `make bench` (test/bench, cmd/hubbench) on %s, in %v. Every number is the median of %d runs, with the least and greatest value in brackets where they differ. Plots show the median with the range as error bars.\n\n",
		started.UTC().Format("2006-01-02"), time.Since(started).Round(time.Second), opts.Runs)
	fmt.Fprintf(&md, "## Machine\n\n%s\n\n", machine())
	fmt.Fprintf(&md, "## How to reproduce\n\n```\nmake bench            # everything (about 40 minutes)\nmake bench BENCH_RUNS=5\n```\n\nRaw results, plots and the hub's pprof profiles are in `%s/`.\n\n", results)
	rel, err := filepath.Rel(filepath.Dir(markdown), results)
	if err != nil {
		return err
	}
	if err := report.WriteMarkdown(&md, rel); err != nil {
		return err
	}
	if notes != "" {
		b, err := os.ReadFile(notes)
		if err != nil {
			return err
		}
		md.Write(b)
	}
	return os.WriteFile(markdown, md.Bytes(), 0o644)
}

// sectionNumber is the number a section's title starts with ("7. One
// object each"); titles without one go last.
func sectionNumber(title string) int {
	n, _, _ := strings.Cut(title, ".")
	v, err := strconv.Atoi(n)
	if err != nil {
		return math.MaxInt
	}
	return v
}

// machine describes where the numbers were measured.
func machine() string {
	model := "unknown CPU"
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	memory := ""
	if info, err := os.ReadFile("/proc/meminfo"); err == nil {
		first, _, _ := strings.Cut(string(info), "\n")
		memory = strings.Join(strings.Fields(strings.TrimPrefix(first, "MemTotal:")), " ")
	}
	kernel, _ := exec.Command("uname", "-sr").Output()
	return fmt.Sprintf("- CPU: %s, %d cores available to Go (GOMAXPROCS %d)\n- Memory: %s\n- Kernel: %s\n- Go: %s\n- Control plane: kube-apiserver and etcd built by `make controlplane`, started by envtest with their defaults (watch cache on)",
		model, runtime.NumCPU(), runtime.GOMAXPROCS(0), memory, strings.TrimSpace(string(kernel)), runtime.Version())
}
