package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Options size a harness run.
type Options struct {
	Runs int // of every measurement; the report gives median and spread

	FanOutClients     []int         // client counts to compare the sides at
	FanOutRate        float64       // changes per second
	FanOutMaxDelivery float64       // deliveries per second at most: the rate drops for many clients
	FanOutDuration    time.Duration // of writing, per run
	FanOutDrain       time.Duration // to wait for the last deliveries
	FanOutConnections int           // connections per side at most; clients share them round-robin
	FanOutObjects     int           // ConfigMaps the writer cycles through
	ObjectBytes       int           // size of their data

	SlowHealthy int // healthy subscribers beside the stalled and lagging ones

	RelistObjects     int // objects that change while the hub's API server is down
	RelistSubscribers int // healthy subscribers beside the relist

	// The selective scenarios (one object each, node agents) and
	// projection. They change objects at FanOutRate (projection: at most
	// FanOutMaxDelivery deliveries/s) for FanOutDuration.
	SelectiveSubscribers  []int         // subscriber counts: one object each, and as many nodes
	PodsPerNode           int           // the node agents' pods on each node
	ProjectionSubscribers int           // subscribers of every pod of a namespace, whole or projected
	WarmUp                time.Duration // of changes, before a selective run's measurement

	// The ingest scenario: the hub and client-go informers, each a process
	// of its own, receive the same changes of IngestObjects ConfigMaps of
	// about IngestObjectBytes of data, then of as many pods, made at
	// IngestRate for IngestDuration after WarmUp's changes; then a hub with
	// IngestSubscribers subscribers.
	IngestObjects     int
	IngestObjectBytes int
	IngestRate        float64
	IngestDuration    time.Duration
	IngestSubscribers int

	// The streams scenario: Streams Watch streams over StreamConnections
	// connections on one hub, StreamParallel opened at once, then
	// StreamChanges changes that each reaches them all.
	Streams           int
	StreamConnections int
	StreamParallel    int
	StreamChanges     int
	// MaxStackPerStream, when set, fails the scenario if the hub's goroutine
	// stacks, idle again after the changes, grew by more than this per
	// stream: an idle stream holds one 8 KiB stack, and a send path that
	// grew past it would double it (docs/architecture.md). The smoke test
	// sets it; at its size the stacks are the one figure without noise.
	MaxStackPerStream float64

	// The consistency check scenario: a hub checks its cache of the
	// cluster's ConfigMaps, topped up to each of CheckObjects in turn,
	// every CheckInterval (each wait jittered up to a fifth longer), so
	// that checks follow each other on a quiet cluster. CheckInterval must
	// leave the harness time, after one check ends, to open the next's
	// CPU window (checkWindowMargin before it can start). The check's
	// LIST, and the baseline's, read CheckPageSize objects a page.
	CheckObjects  []int
	CheckInterval time.Duration
	CheckPageSize int

	// The export scenario: ExportObjects ConfigMaps of ExportObjectBytes
	// of data change at each of ExportRates for ExportDuration (after
	// WarmUp's changes) on a synthetic source, exported to each sink;
	// ExportDrain bounds the wait for the last. First, the API server is
	// offered the greatest rate for ExportProbe.
	ExportRates       []float64
	ExportDuration    time.Duration
	ExportDrain       time.Duration
	ExportObjects     int
	ExportObjectBytes int
	ExportProbe       time.Duration

	SnapshotObjects   int   // ConfigMaps cached, for snapshots, memory and startup
	IdleSubscribers   []int // subscriber counts at which memory and watches are read
	MemorySubscribers int   // subscribers open for the RSS reading

	// Only, when set, names the one scenario to run.
	Only string

	// ProfileDir, when set, receives pprof profiles of the hub taken
	// during the largest fan-out, one-object-each and node-agents runs and
	// the projection runs, and after the memory scenario.
	ProfileDir string
	// Log receives progress.
	Log func(format string, args ...any)
}

// FullOptions are the sizes of `make bench`.
func FullOptions() Options {
	return Options{
		Runs:              3,
		FanOutClients:     []int{1, 10, 100, 1000, 10000},
		FanOutRate:        200,
		FanOutMaxDelivery: 20000,
		FanOutDuration:    10 * time.Second,
		FanOutDrain:       30 * time.Second,
		FanOutConnections: 100,
		FanOutObjects:     100,
		ObjectBytes:       4 << 10,
		SlowHealthy:       100,
		RelistObjects:     5000,
		RelistSubscribers: 100,

		SelectiveSubscribers:  []int{50, 500, 5000},
		PodsPerNode:           2,
		ProjectionSubscribers: 100,
		WarmUp:                time.Second,

		IngestObjects:     100,
		IngestObjectBytes: 2000,
		IngestRate:        200,
		IngestDuration:    20 * time.Second,
		IngestSubscribers: 100,

		Streams:           100000,
		StreamConnections: 1000,
		StreamParallel:    256,
		StreamChanges:     5,

		CheckObjects:  []int{10000, 100000},
		CheckPageSize: 500, // the hub's default, informerhub.DefaultConsistencyPageSize
		CheckInterval: time.Second,

		ExportRates:       []float64{1000, 5000},
		ExportDuration:    10 * time.Second,
		ExportDrain:       2 * time.Minute,
		ExportObjects:     100,
		ExportObjectBytes: 2000,
		ExportProbe:       2 * time.Second,

		SnapshotObjects:   100000,
		IdleSubscribers:   []int{1, 10, 100, 1000, 10000},
		MemorySubscribers: 1000,
	}
}

// SmokeOptions are tiny sizes that run every scenario in seconds, so that
// the harness is exercised by `make test`.
func SmokeOptions() Options {
	return Options{
		Runs:              1,
		FanOutClients:     []int{1, 3},
		FanOutRate:        50,
		FanOutMaxDelivery: 1000,
		FanOutDuration:    200 * time.Millisecond,
		FanOutDrain:       30 * time.Second,
		FanOutConnections: 2,
		FanOutObjects:     3,
		ObjectBytes:       1 << 10,
		SlowHealthy:       3,
		RelistObjects:     20,
		RelistSubscribers: 3,

		SelectiveSubscribers:  []int{2, 4},
		PodsPerNode:           1,
		ProjectionSubscribers: 3,
		WarmUp:                100 * time.Millisecond,

		IngestObjects:     3,
		IngestObjectBytes: 2000,
		IngestRate:        50,
		IngestDuration:    300 * time.Millisecond,
		IngestSubscribers: 3,

		Streams:           200,
		StreamConnections: 10,
		StreamParallel:    16,
		StreamChanges:     2,
		MaxStackPerStream: 13 << 10,

		CheckObjects:  []int{100, 200},
		CheckPageSize: 500, // the hub's default, informerhub.DefaultConsistencyPageSize
		CheckInterval: 500 * time.Millisecond,

		ExportRates:       []float64{100},
		ExportDuration:    300 * time.Millisecond,
		ExportDrain:       30 * time.Second,
		ExportObjects:     3,
		ExportObjectBytes: 2000,
		ExportProbe:       200 * time.Millisecond,

		SnapshotObjects:   200,
		IdleSubscribers:   []int{1, 5},
		MemorySubscribers: 5,
	}
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		o.Log(format, args...)
	}
}

// Run runs every scenario against e and returns the report.
func Run(ctx context.Context, e *Env, o Options) (*Report, error) {
	if o.ProfileDir != "" {
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return nil, err
		}
	}
	r := &Report{}
	for _, scenario := range []struct {
		name string
		run  func(context.Context, *Env, *Options, *Report) error
	}{
		{"fan-out", fanOutScenario},
		{"slow subscribers", slowSubscriberScenario},
		{"relist", relistScenario},
		{"durable history", durableScenario},
		{"streams", streamsScenario},
		// Before the objects' scenarios, which fill the API server; these
		// remove what they create.
		{"one object each, node agents and projection", selectiveScenarios},
		// Before the objects' scenarios too: its informers watch in all
		// namespaces, and would sync every object those create.
		{"ingest", ingestScenario},
		// Before the objects' scenarios as well: its hub checks every
		// ConfigMap of the cluster, which those would add to. It deletes
		// its own.
		{"consistency check", consistencyCheckScenario},
		// Its changes come from a synthetic source; it writes to the API
		// server only to measure how many writes it takes, and deletes
		// them.
		{"export", exportScenario},
		{"snapshot, memory and startup", objectsScenarios},
	} {
		if o.Only != "" && o.Only != scenario.name {
			continue
		}
		o.logf("scenario: %s", scenario.name)
		if err := scenario.run(ctx, e, &o, r); err != nil {
			return r, fmt.Errorf("%s: %w", scenario.name, err)
		}
	}
	return r, nil
}

func (o *Options) profilePath(name string) string {
	if o.ProfileDir == "" {
		return ""
	}
	return filepath.Join(o.ProfileDir, name)
}
