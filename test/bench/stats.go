package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Spread is a number measured over several runs: its median, and the least
// and greatest value seen.
type Spread struct {
	Median, Min, Max float64
	Runs             int
}

func spreadOf(values []float64) Spread {
	if len(values) == 0 {
		return Spread{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	v := slices.Clone(values)
	slices.Sort(v)
	median := v[len(v)/2]
	if len(v)%2 == 0 {
		median = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Spread{Median: median, Min: v[0], Max: v[len(v)-1], Runs: len(v)}
}

// format writes the median with the range beside it, in a unit's format.
func (s Spread) format(f func(float64) string) string {
	if s.Runs == 0 || math.IsNaN(s.Median) {
		return "n/a"
	}
	if s.Runs == 1 || s.Min == s.Max {
		return f(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.Median), f(s.Min), f(s.Max))
}

// percentile returns the p-th percentile (0 < p ≤ 100) of durations, by
// the nearest-rank method; it sorts ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	rank := int(math.Ceil(p / 100 * float64(len(ds))))
	return ds[max(rank, 1)-1]
}

// Formats of the report's units.
func ms(v float64) string       { return fmt.Sprintf("%.1f ms", v) }
func seconds(v float64) string  { return fmt.Sprintf("%.2f s", v) }
func count(v float64) string    { return fmt.Sprintf("%.0f", v) }
func ratio(v float64) string    { return fmt.Sprintf("%.2f×", v) }
func fraction(v float64) string { return fmt.Sprintf("%.3f", v) }
func percent(v float64) string  { return fmt.Sprintf("%.0f%%", v*100) }
func perSecond(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM/s", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk/s", v/1e3)
	}
	return fmt.Sprintf("%.0f/s", v)
}
func byteSize(v float64) string {
	if v < 0 {
		return "−" + byteSize(-v)
	}
	switch {
	case v >= 1<<30:
		return fmt.Sprintf("%.2f GiB", v/(1<<30))
	case v >= 1<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case v >= 1<<10:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	}
	return fmt.Sprintf("%.0f B", v)
}
