// Command streamload is the client of test/bench's streams scenario, in a
// process of its own: it opens -streams Watch streams of the ConfigMaps of
// -namespace over -connections connections to the hub at -addr, then
// prints, as JSON lines (bench.StreamLoadReport), how long opening them
// took, and for each change the latencies of its receipt over every stream.
// It runs until SIGTERM or the end of stdin (the harness has gone).
package main

import (
	"context"
	"flag"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/informerhub/informerhub/test/bench"
)

func main() {
	var l bench.StreamLoad
	flag.StringVar(&l.Addr, "addr", "", "the hub's address")
	flag.StringVar(&l.Namespace, "namespace", "", "the namespace whose ConfigMaps every stream watches")
	flag.IntVar(&l.Streams, "streams", 1000, "Watch streams to open")
	flag.IntVar(&l.Connections, "connections", 10, "connections to spread them over, round-robin")
	flag.IntVar(&l.Parallel, "parallel", 64, "streams being opened at once")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	if err := l.Run(ctx, os.Stdout); err != nil {
		log.Fatal(err)
	}
}
