//go:build unix

// Package benchusage measures what a benchmark's process used while it ran,
// CPU time and heap allocations, and reports them per delivery: the unit of
// informerhub's fan-out benchmarks (see BENCHMARKS.md).
package benchusage

import (
	"runtime"
	"syscall"
	"testing"
	"time"
)

// Usage is the process's CPU time and heap allocations so far.
type Usage struct {
	cpu     time.Duration
	mallocs uint64
}

// Now reads the process's usage.
func Now() Usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err) // RUSAGE_SELF with a valid pointer cannot fail
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return Usage{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), mallocs: ms.Mallocs}
}

// ReportDeliveries reports on b the deliveries per CPU-second and the
// allocations per delivery since start. Both count the whole process:
// clients and fake sources in it included.
func ReportDeliveries(b *testing.B, start Usage, deliveries float64) {
	end := Now()
	b.ReportMetric(deliveries/(end.cpu-start.cpu).Seconds(), "deliveries/cpu-s")
	b.ReportMetric(float64(end.mallocs-start.mallocs)/deliveries, "allocs/delivery")
}

// ReportCPUPerChange reports on b the process's CPU time per change since
// start, in nanoseconds (cpu-ns/change): every goroutine's, the fake API
// server's and the subscribers' included.
func ReportCPUPerChange(b *testing.B, start Usage, changes int) {
	cpu := Now().cpu - start.cpu
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(max(changes, 1)), "cpu-ns/change")
}

// ReportCPUPerOp reports on b the process's CPU time per operation since
// start, in nanoseconds (cpu-ns/op): every goroutine's, the clients' in the
// process included. Unlike ns/op it does not count the time the process
// waited for a CPU, which a machine busy with other work adds to ns/op.
func ReportCPUPerOp(b *testing.B, start Usage, ops int) {
	cpu := Now().cpu - start.cpu
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(max(ops, 1)), "cpu-ns/op")
}
