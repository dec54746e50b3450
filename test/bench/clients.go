package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"k8s.io/client-go/rest"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// A receiver is one client of a fan-out run. It reads messages and records,
// for each change, the delay from the writer's timestamp in the object to
// its receipt. Both sides' receivers do only that, over raw bytes, so the
// harness's own CPU is the same for both.
type receiver struct {
	received  atomic.Int64
	bytes     atomic.Int64    // of the changes received: their messages' (gRPC) or lines' (HTTP) length
	progress  chan struct{}   // signalled (without blocking) after each change
	latencies []time.Duration // written by the receiving goroutine until done is closed
	done      chan struct{}
}

func newReceiver() *receiver {
	return &receiver{done: make(chan struct{}), progress: make(chan struct{}, 1)}
}

// wait waits until r has count changes or has stopped; or until timeout,
// when it returns errTimeout.
func (r *receiver) wait(count int64, timeout <-chan time.Time) error {
	for r.received.Load() < count {
		select {
		case <-r.progress:
		case <-r.done:
			return nil
		case <-timeout:
			return errTimeout
		}
	}
	return nil
}

// record notes one received message at now.
func (r *receiver) record(msg []byte, now time.Time) {
	sent, ok := sentAt(msg)
	if !ok {
		return // not a change of the writer's (a bookmark)
	}
	r.latencies = append(r.latencies, now.Sub(sent))
	r.bytes.Add(int64(len(msg)))
	r.received.Add(1)
	select {
	case r.progress <- struct{}{}:
	default:
	}
}

// sentAtKey is the data key in which the writer stamps each change.
var sentAtKey = []byte(`"sentAt":"`)

// sentAt finds the writer's timestamp in a message: the object's JSON is in
// it verbatim, on both sides.
func sentAt(msg []byte) (time.Time, bool) {
	v, ok := quotedValue(msg, sentAtKey)
	if !ok {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || ns == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// quotedValue finds key (a JSON key, its colon and the opening quote) in b
// and returns the string after it up to its closing quote, without
// decoding b. The values the harness reads this way hold no escapes.
func quotedValue(b, key []byte) ([]byte, bool) {
	i := bytes.Index(b, key)
	if i < 0 {
		return nil, false
	}
	rest := b[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return nil, false
	}
	return rest[:j], true
}

// rawMessage is a response kept as its protobuf bytes: the receivers do not
// decode what they only scan.
type rawMessage struct{ b []byte }

// rawCodec sends requests as protobuf and receives responses as rawMessage.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }

func (rawCodec) Unmarshal(data []byte, v any) error {
	m := v.(*rawMessage)
	m.b = append(m.b[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

// hubConns dials n connections to the hub. window, when not zero, fixes the
// flow-control windows (a stalled client's, so that it stalls soon).
func hubConns(addr string, n int, window int32) ([]*grpc.ClientConn, error) {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if window != 0 {
		opts = append(opts, grpc.WithInitialWindowSize(window), grpc.WithInitialConnWindowSize(window))
	}
	conns := make([]*grpc.ClientConn, 0, n)
	for range n {
		conn, err := grpc.NewClient(addr, opts...)
		if err != nil {
			closeConns(conns)
			return nil, err
		}
		conns = append(conns, conn)
	}
	return conns, nil
}

func closeConns(conns []*grpc.ClientConn) {
	for _, c := range conns {
		c.Close()
	}
}

// openHubWatch opens a Watch and returns once the hub has established it
// (its header, which carries the start token, has arrived).
func openHubWatch(ctx context.Context, conn *grpc.ClientConn, req *informerhubv1.WatchRequest) (grpc.ClientStream, error) {
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{StreamName: "Watch", ServerStreams: true},
		informerhubv1.InformerHubService_Watch_FullMethodName, grpc.ForceCodec(rawCodec{}), grpc.WaitForReady(true))
	if err != nil {
		return nil, err
	}
	if err := stream.SendMsg(req); err != nil {
		return nil, err
	}
	if err := stream.CloseSend(); err != nil {
		return nil, err
	}
	if _, err := stream.Header(); err != nil {
		return nil, err
	}
	return stream, nil
}

// openHubReceivers opens n Watches of req over conns, round-robin, each read
// by a receiver of rs until ctx ends.
func openHubReceivers(ctx context.Context, rs *receivers, conns []*grpc.ClientConn, req *informerhubv1.WatchRequest, n int) error {
	return forEach(ctx, n, 32, func(_ context.Context, i int) error {
		// The stream lives on ctx, not on forEach's, which ends first.
		stream, err := openHubWatch(ctx, conns[i%len(conns)], req)
		if err != nil {
			return err
		}
		r := newReceiver()
		rs.add(r)
		go receiveHub(stream, r)
		return nil
	})
}

// receiveHub runs r on a hub stream until ctx ends or the stream fails.
func receiveHub(stream grpc.ClientStream, r *receiver) {
	defer close(r.done)
	var m rawMessage
	for {
		if err := stream.RecvMsg(&m); err != nil {
			return // the run's end, or the stream failed: waitFor counts it short
		}
		r.record(m.b, time.Now())
	}
}

// readPaced reads a hub stream at most perSecond messages a second, until
// it fails (the run's end).
func readPaced(stream grpc.ClientStream, perSecond float64) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / perSecond))
	defer tick.Stop()
	var m rawMessage
	for stream.RecvMsg(&m) == nil {
		<-tick.C
	}
}

// apiTransports makes n HTTP clients of the API server, each with its own
// connections, so direct watches spread over connections as the hub's
// subscribers do. (client-go shares one transport per configuration
// unless the configuration has its own dialer.)
func apiTransports(cfg *rest.Config, n int) ([]*http.Client, error) {
	clients := make([]*http.Client, 0, n)
	for range n {
		c := rest.CopyConfig(cfg)
		c.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		hc, err := rest.HTTPClientFor(c)
		if err != nil {
			return nil, err
		}
		clients = append(clients, hc)
	}
	return clients, nil
}

func closeTransports(clients []*http.Client) {
	for _, c := range clients {
		c.CloseIdleConnections()
	}
}

// openAPIWatch opens a watch straight from the API server at u, and returns
// once the API server has answered (its response header has arrived).
func openAPIWatch(ctx context.Context, hc *http.Client, u string) (io.ReadCloser, error) {
	return apiGet(ctx, hc, u)
}

// apiGet sends a GET for JSON to the API server and returns the body of a
// 200 answer; any other is an error that quotes the body's start.
func apiGet(ctx context.Context, hc *http.Client, u string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s: %s", u, resp.Status, body)
	}
	return resp.Body, nil
}

// receiveAPI runs r on a direct watch: one JSON event per line.
func receiveAPI(body io.ReadCloser, r *receiver) {
	defer close(r.done)
	defer body.Close()
	br := bufio.NewReaderSize(body, 64<<10)
	var long []byte // a line longer than the buffer
	for {
		line, err := br.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			long = append(long, line...)
			continue
		case err != nil:
			return // the run's end, or the watch failed: waitFor counts it short
		}
		if long != nil {
			line = append(long, line...)
			long = nil
		}
		r.record(line, time.Now())
	}
}

// receivers is a set of receivers, filled while streams open concurrently.
type receivers struct {
	mu  sync.Mutex // guards all while streams open
	all []*receiver
}

func (rs *receivers) add(r *receiver) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.all = append(rs.all, r)
}

// waitFor waits until every receiver has count changes or has stopped, or
// until deadline. It returns how many receivers fell short.
func (rs *receivers) waitFor(count int64, deadline time.Time) int {
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	for _, r := range rs.all {
		if r.wait(count, timeout.C) != nil {
			break
		}
	}
	short := 0
	for _, r := range rs.all {
		if r.received.Load() < count {
			short++
		}
	}
	return short
}

// stopped waits for every receiver to stop, once their streams' context has
// ended.
func (rs *receivers) stopped() {
	for _, r := range rs.all {
		<-r.done
	}
}
