package bench

import (
	"context"
	"fmt"
	"os"
)

// durableScenario measures what keeping the history on disk
// (--history-dir) costs the streams: healthy subscribers' p99 with it on
// against off, at the fan-out's rate of 4 KiB changes, each run on fresh
// hubs, alternating which goes first.
func durableScenario(ctx context.Context, e *Env, o *Options, r *Report) error {
	const ns = "bench-durable"
	if err := e.createNamespace(ctx, ns); err != nil {
		return err
	}
	w, err := newWriter(ctx, e, ns, o.FanOutObjects, o.ObjectBytes)
	if err != nil {
		return err
	}
	rate := min(o.FanOutRate, o.FanOutMaxDelivery/float64(o.SlowHealthy))
	var off, on, ratios []float64
	for run := range o.Runs {
		p99 := map[bool]float64{}
		for i := range 2 {
			disk := (run+i)%2 == 1
			var args []string
			if disk {
				dir, err := os.MkdirTemp("", "hubbench-history-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				args = []string{"--history-dir", dir}
			}
			hub, err := e.startHub(ctx, args...)
			if err != nil {
				return err
			}
			res, err := e.fanOut(ctx, o, sideHub, hub, w, o.SlowHealthy, slowClients{}, rate)
			hub.stop()
			if err != nil {
				return fmt.Errorf("disk history %v: %w", disk, err)
			}
			if res.short > 0 {
				return fmt.Errorf("disk history %v: %d subscribers missed changes", disk, res.short)
			}
			o.logf("durable history run %d: disk %v: p50 %v, p99 %v", run+1, disk, res.p50, res.p99)
			p99[disk] = ms1(res.p99)
		}
		off, on = append(off, p99[false]), append(on, p99[true])
		ratios = append(ratios, p99[true]/p99[false])
	}
	r99 := spreadOf(ratios)
	r.Sections = append(r.Sections, Section{
		Title: "12. Recording the history on disk",
		Intro: fmt.Sprintf(`%d healthy hub subscribers receive %.0f changes/s of ConfigMaps of about %d KiB for %v, as in scenario 1, from a hub without --history-dir and from one with it (a fresh directory each run), which writes every change to disk with its previous state and syncs each batch. The ratio is per run, of the same run's two hubs; each run alternates which starts first. Appending, catching up and starting from the disk are measured in process in section 13.`,
			o.SlowHealthy, rate, o.ObjectBytes>>10, o.FanOutDuration),
		Tables: []Table{{
			Header: []string{"subscribers", "changes/s", "p99 without --history-dir", "p99 with it", "ratio"},
			Rows:   [][]string{{fmt.Sprint(o.SlowHealthy), fmt.Sprintf("%.0f", rate), spreadOf(off).format(ms), spreadOf(on).format(ms), r99.format(ratio)}},
		}},
	})
	r.Targets = append(r.Targets, Target{Name: "Recording the history on disk", Goal: "healthy p99 with --history-dir ≤ 1.1× without",
		Measured: r99.format(ratio), Met: r99.Median <= 1.1})
	return nil
}
