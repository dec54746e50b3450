package clients

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestNodeClient runs the test suite of the Node.js client (clients/node,
// `node --test`) against a real API server and hub. The suite does the
// checking; a failure there, or a suite that does not run, fails this test.
func TestNodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("the Node.js client's tests need node (v20.3 or later) on PATH: %v", err)
	}
	// go test runs in the package's directory, test/clients.
	dir, err := filepath.Abs(filepath.Join("..", "..", "clients", "node"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		t.Fatalf("%s has no node_modules: run `make node-deps` (npm ci in clients/node): %v", dir, err)
	}
	env := clientEnv(t)

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec")
	cmd.Dir = dir
	cmd.Env = env
	out := &nodeLineLogger{t: t}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 10 * time.Second // after a kill, do not wait forever for the pipes
	start := time.Now()
	err = cmd.Run()
	out.flush()
	if ctx.Err() != nil {
		t.Fatalf("node --test in %s did not finish within its time limit (output above)", dir)
	}
	if err != nil {
		t.Fatalf("node --test in %s failed after %s: %v (output above)", dir, time.Since(start).Round(time.Millisecond), err)
	}
}

// nodeLineLogger logs what a process writes, a line at a time, so that
// `go test -v` shows the suite's progress as it runs and a failed test shows
// all of it.
type nodeLineLogger struct {
	t   *testing.T
	mu  sync.Mutex // guards buf: stdout and stderr are written concurrently
	buf []byte
}

func (l *nodeLineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		l.t.Log(string(l.buf[:i]))
		l.buf = l.buf[i+1:]
	}
}

// flush logs a last line without a newline.
func (l *nodeLineLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.t.Log(string(l.buf))
		l.buf = nil
	}
}
