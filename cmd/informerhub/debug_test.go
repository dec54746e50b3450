package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestDebugEndpoints: --debug-listen serves profiles and memory statistics,
// which the benchmark harness reads; and refuses an address other than
// loopback unless told otherwise.
func TestDebugEndpoints(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	debugAddr := lis.Addr().String()
	serveWith(t, listeners{debug: lis}, "--auth=none")

	get := func(path string) []byte {
		t.Helper()
		resp, err := http.Get("http://" + debugAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v\n%s", path, resp.StatusCode, err, body)
		}
		return body
	}
	get("/debug/pprof/heap?gc=1")
	var vars struct {
		MemStats struct{ HeapAlloc, NumGC uint64 } `json:"memstats"`
	}
	if err := json.Unmarshal(get("/debug/vars"), &vars); err != nil {
		t.Fatal(err)
	}
	if vars.MemStats.HeapAlloc == 0 || vars.MemStats.NumGC == 0 {
		t.Errorf("memstats after a forced collection: %+v", vars.MemStats)
	}

	o, err := parseFlags([]string{"--auth=none", "--debug-listen", "0.0.0.0:0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := listenDebug(o); err == nil || !strings.Contains(err.Error(), "not loopback") {
		t.Errorf("--debug-listen on every interface: %v", err)
	}
}
