package oneport

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/informerhub/informerhub/internal/testpki"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// frame is one HTTP/2 frame as it crosses the wire.
func frame(typ http2.FrameType, flags http2.Flags, payload ...byte) []byte {
	n := len(payload)
	return append([]byte{byte(n >> 16), byte(n >> 8), byte(n), byte(typ), byte(flags), 0, 0, 0, 0}, payload...)
}

// scriptedConn reads its bytes in chunks of a given size, then err.
type scriptedConn struct {
	net.Conn
	data  []byte
	chunk int
	err   error
}

func (c *scriptedConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, c.err
	}
	n := copy(p[:min(len(p), c.chunk)], c.data)
	c.data = c.data[n:]
	return n, nil
}

func readAllOf(t *testing.T, data []byte, chunk int) []byte {
	t.Helper()
	c := &settingsAckConn{Conn: &scriptedConn{data: data, chunk: chunk, err: io.EOF}}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("chunks of %d: %v", chunk, err)
	}
	return got
}

// countingReads counts the reads of a connection.
type countingReads struct {
	scriptedConn
	reads int
}

func (c *countingReads) Read(p []byte) (int, error) {
	c.reads++
	return c.scriptedConn.Read(p)
}

// TestReadBufferedConnReadsFramesTogether: on an HTTP/2 connection, the
// frames a client sent together (two WINDOW_UPDATEs, as net/http's client
// sends them) are read from the connection at once, though net/http's
// server reads each frame's header and payload apart; a read larger than
// the buffer goes straight through. An HTTP/1.1 connection is read as it
// is, without a buffer.
func TestReadBufferedConnReadsFramesTogether(t *testing.T) {
	preface := []byte(http2.ClientPreface)
	update := frame(http2.FrameWindowUpdate, 0, 0, 0, 0x10, 0)
	big := make([]byte, 2*readBufferSize)
	// The preface comes in two reads, as a client may send it.
	raw := &countingReads{scriptedConn: scriptedConn{data: slices.Concat(preface, update, update, big), chunk: 2}}
	c := newReadBufferedConn(raw)
	if got := readFull(t, c, len(preface)); !bytes.Equal(got, preface) {
		t.Fatalf("read %q, want the preface", got)
	}
	if c.r == nil {
		t.Fatal("an HTTP/2 connection is not read through a buffer")
	}
	raw.chunk, raw.reads = 2*len(update), 0
	for range 2 {
		header, payload := readFull(t, c, 9), readFull(t, c, 4)
		if got := slices.Concat(header, payload); !bytes.Equal(got, update) {
			t.Fatalf("read %x, want %x", got, update)
		}
	}
	if raw.reads != 1 {
		t.Fatalf("%d reads of the connection for two frames sent together, want 1", raw.reads)
	}
	raw.chunk = len(big)
	got := make([]byte, len(big))
	if n, err := c.Read(got); n != len(big) || err != nil {
		t.Fatalf("a read of %d bytes: %d, %v", len(big), n, err)
	}
	if raw.reads != 2 {
		t.Fatalf("%d reads of the connection, want 2: a large read goes straight through", raw.reads)
	}

	request := []byte("GET / HTTP/1.1\r\nHost: hub\r\n\r\n")
	http1 := newReadBufferedConn(&scriptedConn{data: request, chunk: 3})
	if got := readFull(t, http1, len(request)); !bytes.Equal(got, request) || http1.r != nil {
		t.Fatalf("an HTTP/1.1 connection: read %q, buffered %v", got, http1.r != nil)
	}
}

func readFull(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSettingsAckConnDropsOnlyTheFirstAcknowledgement(t *testing.T) {
	settings := frame(http2.FrameSettings, 0, 0, 4, 0, 0, 0xff, 0xff) // INITIAL_WINDOW_SIZE
	ack := frame(http2.FrameSettings, http2.FlagSettingsAck)
	// A DATA frame whose payload looks like an acknowledgement: payloads
	// are passed, never parsed.
	data := frame(http2.FrameData, 0, ack...)
	headers := frame(http2.FrameHeaders, http2.FlagHeadersEndHeaders, 0x82, 0x86, 0x84)
	var in, want []byte
	for _, part := range [][]byte{[]byte(http2.ClientPreface), settings, data, headers, ack, headers, ack} {
		in = append(in, part...)
	}
	for _, part := range [][]byte{[]byte(http2.ClientPreface), settings, data, headers, headers, ack} {
		want = append(want, part...)
	}
	for chunk := 1; chunk <= len(in); chunk++ {
		if got := readAllOf(t, in, chunk); !bytes.Equal(got, want) {
			t.Fatalf("chunks of %d:\n got %x\nwant %x", chunk, got, want)
		}
	}
}

func TestSettingsAckConnPassesOtherConnectionsAsTheyAre(t *testing.T) {
	for _, in := range []string{
		"GET / HTTP/1.0\r\n\r\n",
		"PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\n" + string(frame(http2.FrameSettings, http2.FlagSettingsAck)),
		"PRI * HTTP/1.1\r\n\r\n",
		"",
	} {
		for chunk := 1; chunk <= max(len(in), 1); chunk++ {
			if got := readAllOf(t, []byte(in), chunk); string(got) != in {
				t.Fatalf("chunks of %d: got %q, want %q", chunk, got, in)
			}
		}
	}
}

func TestSettingsAckConnReturnsWhatItReadBeforeAnError(t *testing.T) {
	broken := errors.New("connection reset")
	in := []byte(http2.ClientPreface[:10])
	c := &settingsAckConn{Conn: &scriptedConn{data: in, chunk: len(in), err: broken}}
	got, err := io.ReadAll(c)
	if !bytes.Equal(got, in) || !errors.Is(err, broken) {
		t.Fatalf("got %q, %v; want %q, %v", got, err, in, broken)
	}
}

// hub is a Server on a loopback port with a health service on its gRPC side
// and, on its HTTP side, a handler that answers with the request's protocol
// and its peer's client certificate. Its SniffTimeout is an hour: no test
// passes by waiting it out.
type hub struct {
	addr string
	tls  *tls.Config // of clients; nil: plaintext

	mu        sync.Mutex // guards grpcPeers
	grpcPeers []*peer.Peer
}

func startHub(t *testing.T, serverTLS *tls.Config) *hub {
	t.Helper()
	h := &hub{}
	g := grpc.NewServer(grpc.Creds(Credentials()), grpc.UnaryInterceptor(
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			p, _ := peer.FromContext(ctx)
			h.mu.Lock()
			h.grpcPeers = append(h.grpcPeers, p)
			h.mu.Unlock()
			return next(ctx, req)
		}))
	healthpb.RegisterHealthServer(g, health.NewServer())
	httpHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if wrapped, _ := r.Context().Value(wrappedKey{}).(bool); !wrapped {
			http.Error(w, "not served through Config.HTTPConn", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%s %s", r.Proto, clientName(r.Context()))
	})
	s := New(Config{GRPC: g, HTTP: httpHandler, TLS: serverTLS, SniffTimeout: time.Hour,
		// As package cork wraps them: the TLS state is found beneath.
		HTTPConn: func(c net.Conn) net.Conn { return &wrappedConn{Conn: c} },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			_, wrapped := c.(*wrappedConn)
			return context.WithValue(ctx, wrappedKey{}, wrapped)
		}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = lis.Addr().String()
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return h
}

// wrappedConn is a connection as Config.HTTPConn wraps it.
type wrappedConn struct{ net.Conn }

func (c *wrappedConn) NetConn() net.Conn { return c.Conn }

// wrappedKey marks, in a request's context, whether Config.ConnContext
// was given the connection Config.HTTPConn made.
type wrappedKey struct{}

// clientName is the common name of the certificate of ctx's peer, or "-".
func clientName(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "no-peer"
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
		return info.State.PeerCertificates[0].Subject.CommonName
	}
	return "-"
}

func (h *hub) checkHealth(t *testing.T) {
	t.Helper()
	creds := insecure.NewCredentials()
	if h.tls != nil {
		creds = credentials.NewTLS(h.tls)
	}
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health over native gRPC: %v, %v", resp, err)
	}
}

// get makes requests to the HTTP side over one connection of client, and
// returns their answers.
func (h *hub) get(t *testing.T, client *http.Client, n int) []string {
	t.Helper()
	defer client.CloseIdleConnections()
	scheme := "http"
	if h.tls != nil {
		scheme = "https"
	}
	var answers []string
	for range n {
		resp, err := client.Get(scheme + "://" + h.addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, string(body))
	}
	return answers
}

func httpClient(tlsConfig *tls.Config, http1, http2 bool) *http.Client {
	var p http.Protocols
	p.SetHTTP1(http1)
	if tlsConfig == nil {
		p.SetUnencryptedHTTP2(http2)
	} else {
		p.SetHTTP2(http2)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, Protocols: &p}}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func equal(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

func TestGRPCAndHTTPShareAPlaintextPort(t *testing.T) {
	h := startHub(t, nil)
	h.checkHealth(t)
	if got := h.get(t, httpClient(nil, false, true), 3); !equal(got, repeat("HTTP/2.0 -", 3)) {
		t.Errorf("h2c: %q", got)
	}
	if got := h.get(t, httpClient(nil, true, false), 2); !equal(got, repeat("HTTP/1.1 -", 2)) {
		t.Errorf("HTTP/1.1: %q", got)
	}
	if len(h.grpcPeers) != 1 {
		t.Errorf("grpc-go served %d calls, want the 1 health check", len(h.grpcPeers))
	}
}

func TestAShortHTTP10RequestIsAnsweredAtOnce(t *testing.T) {
	h := startHub(t, nil)
	// Shorter than the HTTP/2 preface: the matcher must not wait for more.
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "HTTP/1.0 -" {
		t.Fatalf("got %q", body)
	}
}

// TestServerSettingsComeBeforeTheFirstRequest is a client that sends no
// request before the server's SETTINGS, as grpc-java and gRPC C-core do,
// acknowledges them, and then makes a request of the HTTP side, whose
// server (net/http) did not send those SETTINGS.
func TestServerSettingsComeBeforeTheFirstRequest(t *testing.T) {
	h := startHub(t, nil)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A bound on a failing test, far above any machine's latency.
	if err := c.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatalf("no SETTINGS from the server before the first request: %v", err)
	}
	if s, ok := f.(*http2.SettingsFrame); !ok || s.IsAck() {
		t.Fatalf("the server's first frame is %v, want its SETTINGS", f)
	}
	if err := fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, hf := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", h.addr}, {":path", "/"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no answer to the request: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					t.Fatal(err)
				}
			}
		case *http2.GoAwayFrame:
			t.Fatalf("the server ended the connection: %v %s", f.ErrCode, f.DebugData())
		case *http2.DataFrame:
			if string(f.Data()) != "HTTP/2.0 -" {
				t.Fatalf("got %q", f.Data())
			}
			return
		}
	}
}

func TestGRPCAndHTTPShareATLSPortWithClientCertificates(t *testing.T) {
	ca := testpki.NewCA(t, "test-ca")
	h := startHub(t, &tls.Config{
		Certificates: []tls.Certificate{ca.Server(t)},
		ClientCAs:    ca.Pool,
		ClientAuth:   tls.VerifyClientCertIfGiven,
	})
	h.tls = &tls.Config{RootCAs: ca.Pool, Certificates: []tls.Certificate{ca.Client(t, "reader")}}
	h.checkHealth(t)
	if len(h.grpcPeers) != 1 {
		t.Fatalf("grpc-go served %d calls, want the 1 health check", len(h.grpcPeers))
	}
	if p := h.grpcPeers[0]; clientName(peer.NewContext(t.Context(), p)) != "reader" {
		t.Errorf("grpc-go's peer has no client certificate: %+v", p.AuthInfo)
	}
	if got := h.get(t, httpClient(h.tls, false, true), 2); !equal(got, repeat("HTTP/2.0 reader", 2)) {
		t.Errorf("h2 (ALPN): %q", got)
	}
	if got := h.get(t, httpClient(h.tls, true, false), 2); !equal(got, repeat("HTTP/1.1 reader", 2)) {
		t.Errorf("HTTP/1.1 over TLS: %q", got)
	}
	anonymous := &tls.Config{RootCAs: ca.Pool}
	if got := h.get(t, httpClient(anonymous, false, true), 1); !equal(got, []string{"HTTP/2.0 -"}) {
		t.Errorf("h2 without a client certificate: %q", got)
	}
}

// clientStart is what a client sends first: the preface, its SETTINGS and
// the HEADERS of a request with content-type ct.
func clientStart(t *testing.T, ct string) []byte {
	t.Helper()
	var buf, block bytes.Buffer
	buf.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&buf, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	enc := hpack.NewEncoder(&block)
	for _, hf := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "hub"}, {":path", "/informerhub.v1.InformerHubService/Watch"}, {"content-type", ct}} {
		_ = enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestOnlyGRPCInProtobufGoesToGRPCGo: grpc-go decodes protobuf whatever
// the content subtype says; gRPC in JSON, gRPC-Web and the Connect
// protocol go to connect-go.
func TestOnlyGRPCInProtobufGoesToGRPCGo(t *testing.T) {
	s := New(Config{})
	for ct, want := range map[string]bool{
		"application/grpc":               true,
		"application/grpc+proto":         true,
		"Application/GRPC+Proto":         true,
		"application/grpc;charset=utf-8": true,
		"application/grpc+json":          false,
		"application/grpc-web+proto":     false,
		"application/grpc-web":           false,
		"application/connect+proto":      false,
		"application/proto":              false,
		"application/json":               false,
		"":                               false,
	} {
		if got := s.matchGRPC(io.Discard, bytes.NewReader(clientStart(t, ct))); got != want {
			t.Errorf("content-type %q: to grpc-go %v, want %v", ct, got, want)
		}
	}
}

// TestTheMatcherAllocatesNoFrameLargerThanItsSettingsAllow: a frame header
// that announces 16 MiB, and nothing after it, costs the matcher no 16 MiB
// buffer (it would hold one per such connection for SniffTimeout).
func TestTheMatcherAllocatesNoFrameLargerThanItsSettingsAllow(t *testing.T) {
	s := New(Config{})
	in := append([]byte(http2.ClientPreface), 0xff, 0xff, 0xff, byte(http2.FrameData), 0, 0, 0, 0, 1)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if s.matchGRPC(io.Discard, bytes.NewReader(in)) {
		t.Fatal("matched")
	}
	runtime.ReadMemStats(&after)
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 1<<20 {
		t.Fatalf("the matcher allocated %d bytes for a frame header", allocated)
	}
}

// TestShutdownClosesConnectionsBeingMatched: a connection that sent no
// request yet does not keep Serve from returning after Shutdown (cmux would
// wait for it up to SniffTimeout, an hour here).
func TestShutdownClosesConnectionsBeingMatched(t *testing.T) {
	g := grpc.NewServer(grpc.Creds(Credentials()))
	s := New(Config{GRPC: g, HTTP: http.NotFoundHandler(), SniffTimeout: time.Hour})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	quiet := make([]net.Conn, 3)
	for i := range quiet {
		if quiet[i], err = net.Dial("tcp", lis.Addr().String()); err != nil {
			t.Fatal(err)
		}
		defer quiet[i].Close()
	}
	// Half a preface: the matcher is reading it.
	if _, err := io.WriteString(quiet[0], http2.ClientPreface[:10]); err != nil {
		t.Fatal(err)
	}
	// A request answered: the server is serving, and has accepted the
	// quiet connections before it (one accept loop, in order).
	h := &hub{addr: lis.Addr().String()}
	h.get(t, httpClient(nil, true, false), 1)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Serve did not return after Shutdown")
	}
	for i, c := range quiet {
		_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // a bound on a failing test
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("connection %d is still open", i)
		}
	}
}

// TestReadTimeoutBoundsRequestsNotHandlers: ReadTimeout cuts off a request
// whose body never comes, even one no handler reads (net/http reads what
// is left, to reuse the connection), and not a handler that takes longer:
// over HTTP/1.1, a request without a body, and the next on its connection,
// run to their end; over h2c too.
func TestReadTimeoutBoundsRequestsNotHandlers(t *testing.T) {
	const readTimeout = 100 * time.Millisecond
	g := grpc.NewServer(grpc.Creds(Credentials()))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/slow" {
			http.NotFound(w, r) // leaves the body unread
			return
		}
		<-time.After(3 * readTimeout) // what is tested: time passing
		if err := r.Context().Err(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "ok")
	})
	s := New(Config{GRPC: g, HTTP: handler, ReadTimeout: readTimeout})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	defer func() {
		s.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	addr := lis.Addr().String()

	for _, http1 := range []bool{true, false} {
		client := httpClient(nil, http1, !http1)
		for i := range 2 { // on one connection
			resp, err := client.Get("http://" + addr + "/slow")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != "ok" {
				t.Errorf("%s, request %d: %d %q", resp.Proto, i, resp.StatusCode, body)
			}
		}
		client.CloseIdleConnections()
	}

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /nope HTTP/1.1\r\nHost: hub\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Minute)) // a bound on a failing test
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("a request whose body never came: %v, want the connection closed", err)
	}
}
