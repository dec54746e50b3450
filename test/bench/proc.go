package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/informerhub/informerhub/internal/testhub"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times. It is 100
// on every Linux architecture Go supports.
const clockTicks = 100

// cpuTime returns the user plus system CPU time a process has used.
func cpuTime(pid int) (time.Duration, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the CPU time of process %d needs /proc: %w", pid, err)
	}
	// The command name (field 2) may hold spaces; the fields after it do not.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(stat[i+1:]))
	// Fields 14 (utime) and 15 (stime) of stat(5), counted after field 2.
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// cpuTimes sums cpuTime over processes.
func cpuTimes(pids ...int) (time.Duration, error) {
	var total time.Duration
	for _, pid := range pids {
		t, err := cpuTime(pid)
		if err != nil {
			return 0, err
		}
		total += t
	}
	return total, nil
}

// writeCalls returns how many write system calls a process has made
// (/proc/<pid>/io's syscw: write, writev, sendmsg and the like).
func writeCalls(pid int) (int64, error) {
	io, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(io), "\n") {
		if rest, ok := strings.CutPrefix(line, "syscw:"); ok {
			return strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/io has no syscw", pid)
}

// residentBytes returns a process's resident set size (VmRSS).
func residentBytes(pid int) (int64, error) { return statusBytes(pid, "VmRSS") }

// statusBytes returns a size in kB from a process's /proc/<pid>/status, in
// bytes: field is VmRSS, VmHWM (the peak resident set size) or another.
func statusBytes(pid int, field string) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// childProcess finds the child of this process running the executable
// named base: the control plane's kube-apiserver and etcd, which envtest
// starts.
func childProcess(base string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("finding %s needs /proc: %w", base, err)
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || filepath.Base(exe) != base {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(self) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("no %s process started by this one", base)
}

// threadTimes are the CPU times of a process's threads, by thread id.
type threadTimes map[int]time.Duration

// readThreadTimes reads the CPU time of each of a process's threads from
// /proc/<pid>/task/<tid>/schedstat, in nanoseconds: finer than cpuTime's
// clock ticks, which matters for a process that uses a few milliseconds in
// a short run.
func readThreadTimes(pid int) (threadTimes, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	times := threadTimes{}
	for _, e := range entries {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited meanwhile: since says so
		}
		// The first field is the time spent on a CPU, in nanoseconds.
		first, _, _ := strings.Cut(strings.TrimSpace(string(stat)), " ")
		ns, err := strconv.ParseInt(first, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s/%d/schedstat: %w", dir, tid, err)
		}
		times[tid] = time.Duration(ns)
	}
	return times, nil
}

// since returns the CPU time the threads have used since before, and false
// when a thread of before has exited, whose time is then lost.
func (t threadTimes) since(before threadTimes) (time.Duration, bool) {
	var d time.Duration
	for tid, was := range before {
		now, ok := t[tid]
		if !ok {
			return 0, false
		}
		d += now - was
	}
	for tid, now := range t {
		if _, ok := before[tid]; !ok {
			d += now // a thread started since
		}
	}
	return d, true
}

// cpuMeter measures the CPU time a process uses from its start: from its
// threads' times, or, if a thread exits meanwhile, from its clock ticks.
type cpuMeter struct {
	pid     int
	ticks   time.Duration
	threads threadTimes
}

func startCPUMeter(pid int) (cpuMeter, error) {
	m := cpuMeter{pid: pid}
	var err error
	if m.ticks, err = cpuTime(pid); err != nil {
		return m, err
	}
	m.threads, err = readThreadTimes(pid)
	return m, err
}

// used returns the CPU time the process has used since the meter started.
func (m cpuMeter) used() (time.Duration, error) {
	threads, err := readThreadTimes(m.pid)
	if err != nil {
		return 0, err
	}
	ticks, err := cpuTime(m.pid)
	if err != nil {
		return 0, err
	}
	if d, ok := threads.since(m.threads); ok {
		return d, nil
	}
	return ticks - m.ticks, nil
}

// lineProcess is a helper process of the harness that speaks in lines
// (cmd/benchinformer, cmd/streamload): the harness writes to its stdin and
// reads its stdout a line at a time.
type lineProcess struct {
	name   string // as errors call it
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // its stdout, a line each; closed at its end
	output testhub.SyncBuffer
}

// startLineProcess starts cmd, named name in errors, with its stdout read
// into lines (buffer of them at most ahead of the reader) and its stderr
// kept.
func startLineProcess(name string, cmd *exec.Cmd, buffer int) (*lineProcess, error) {
	p := &lineProcess{name: name, cmd: cmd, lines: make(chan string, buffer)}
	cmd.Stderr = &p.output
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	go func() {
		defer close(p.lines)
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			p.lines <- lines.Text()
		}
	}()
	return p, nil
}

// next reads the process's next line, waiting for timeout at most.
func (p *lineProcess) next(timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case line, ok := <-p.lines:
		if !ok {
			_ = p.cmd.Wait()
			return "", fmt.Errorf("%s has exited: %s", p.name, p.output.String())
		}
		return line, nil
	case <-t.C:
		return "", fmt.Errorf("%s did not answer within %v: %w\n%s", p.name, timeout, errTimeout, p.output.String())
	}
}

// wait reads the process's output to its end, killing it if it lingers
// for longer than grace, and waits for it.
func (p *lineProcess) wait(grace time.Duration) {
	kill := time.AfterFunc(grace, func() { _ = p.cmd.Process.Kill() })
	defer kill.Stop()
	for range p.lines {
	}
	_ = p.cmd.Wait()
}

// quiet waits until the processes, together, use less than a tenth of a
// core over a 20 ms window (a collection after a large read, say, has
// ended), or at most 2 s: a latency measured next is then not charged for
// the work of the one before.
func quiet(ctx context.Context, pids ...int) error {
	const window, busy, most = 20 * time.Millisecond, 2 * time.Millisecond, 2 * time.Second
	deadline := time.Now().Add(most)
	for time.Now().Before(deadline) {
		meters := make([]cpuMeter, len(pids))
		for i, pid := range pids {
			var err error
			if meters[i], err = startCPUMeter(pid); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(window):
		}
		var used time.Duration
		for _, m := range meters {
			d, err := m.used()
			if err != nil {
				return err
			}
			used += d
		}
		if used < busy {
			return nil
		}
	}
	return nil
}
