package main

import (
	"expvar"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime/metrics"
)

// debugHandler serves Go's profiles (/debug/pprof/) and runtime memory
// statistics (/debug/vars, from expvar). It is opt-in (--debug-listen):
// profiles show the hub's internals, so like the gRPC port without
// authentication it is for loopback unless told otherwise.
//
// Measure the heap after a collection by fetching /debug/pprof/heap?gc=1
// first, then /debug/vars; the benchmark harness does (test/bench).
// /debug/vars also holds heapLive: the heap the last collection found live
// (runtime/metrics /gc/heap/live:bytes), which, unlike HeapAlloc, does not
// count garbage waiting for the next one.
func debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/debug/vars", expvar.Handler())
	return mux
}

func init() {
	expvar.Publish("heapLive", expvar.Func(func() any {
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		metrics.Read(sample)
		if sample[0].Value.Kind() != metrics.KindUint64 {
			return nil
		}
		return sample[0].Value.Uint64()
	}))
}

// listenDebug binds --debug-listen, refusing an address other than loopback
// unless --insecure-allow-remote-debug.
func listenDebug(o *options) (net.Listener, error) {
	lis, err := net.Listen("tcp", o.debugListen)
	if err != nil {
		return nil, fmt.Errorf("--debug-listen: %w", err)
	}
	if addr, ok := lis.Addr().(*net.TCPAddr); !o.allowRemoteDebug && (!ok || !addr.IP.IsLoopback()) {
		lis.Close()
		return nil, fmt.Errorf("--debug-listen %s is not loopback: profiles expose the hub's memory; pass --insecure-allow-remote-debug to serve them anyway", o.debugListen)
	}
	return lis, nil
}
