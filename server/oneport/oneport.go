package oneport

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/soheilhy/cmux"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Config says what a Server serves, and how.
type Config struct {
	// GRPC serves the connections whose first request is native gRPC.
	// Create it with grpc.Creds(Credentials()). Required.
	GRPC *grpc.Server
	// HTTP serves every other connection's requests. Required.
	HTTP http.Handler
	// TLS, when set, is the listener's TLS configuration; its NextProtos
	// are replaced by h2 and http/1.1. Default: plaintext (HTTP/2 as h2c).
	TLS *tls.Config

	// SniffTimeout bounds how long a new connection may take to complete
	// its TLS handshake and send its first request's headers. One that
	// has not is handed to the HTTP side, whose own timeouts then apply
	// (ReadHeaderTimeout, the same; IdleTimeout, for HTTP/2). Default: 10s.
	SniffTimeout time.Duration
	// ReadTimeout bounds how long an HTTP request may take to come, its
	// headers and body, from its first byte (http.Server.ReadTimeout;
	// over HTTP/2, per stream). connect-go reads a call's request whole
	// before authentication runs, and net/http reads what a handler left
	// unread: without it, a client without credentials could hold a call
	// open, and the shutdown with it, by never finishing a request. A
	// stream's responses are not bounded by it. Default: twice
	// SniffTimeout.
	ReadTimeout time.Duration
	// MaxHeaderBytes bounds an HTTP request's headers. Default: 64 KiB.
	MaxHeaderBytes int
	// MaxConcurrentStreams bounds the streams of one HTTP/2 connection of
	// the HTTP side, as grpc.MaxConcurrentStreams does gRPC's. Default:
	// 100.
	MaxConcurrentStreams uint32
	// KeepaliveTime and KeepaliveTimeout find dead HTTP/2 clients of the
	// HTTP side, as grpc's keepalive does gRPC's: a connection quiet for
	// KeepaliveTime is pinged, and closed if no answer comes within
	// KeepaliveTimeout. Defaults: 1m and 20s.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// IdleTimeout closes an HTTP connection that has had no request for
	// this long. Default: 5m.
	IdleTimeout time.Duration
	// Logger receives what the HTTP side logs. Default: slog.Default().
	Logger *slog.Logger

	// HTTPConn, when set, is what the HTTP side serves in place of each
	// of its connections, such as a cork.Conn around it (so that the
	// streams of a connection share its writes). It is given the
	// connection after TLS and the matcher; its result keeps the
	// connection's deadlines and Close.
	HTTPConn func(net.Conn) net.Conn
	// ConnContext, when set, derives the context of each HTTP
	// connection's requests from the one the Server made (with the
	// connection's peer), as http.Server.ConnContext does; it is given
	// the connection HTTPConn returned.
	ConnContext func(context.Context, net.Conn) context.Context
}

func (c *Config) setDefaults() {
	if c.SniffTimeout <= 0 {
		c.SniffTimeout = 10 * time.Second
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 2 * c.SniffTimeout
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = 64 << 10
	}
	if c.MaxConcurrentStreams == 0 {
		c.MaxConcurrentStreams = 100
	}
	if c.KeepaliveTime <= 0 {
		c.KeepaliveTime = time.Minute
	}
	if c.KeepaliveTimeout <= 0 {
		c.KeepaliveTimeout = 20 * time.Second
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = 5 * time.Minute
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Server serves a grpc.Server and an http.Handler on one listener.
type Server struct {
	cfg  Config
	http *http.Server

	mu       sync.Mutex // guards lis and closed
	lis      net.Listener
	closed   bool // by Shutdown or Close: Serve serves nothing
	sniffing sniffing
}

// New returns a Server of cfg.
func New(cfg Config) *Server {
	cfg.setDefaults()
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	// The http.Server sees the connections after TLS (the listener made
	// the handshake): HTTP/2 under TLS is, to it, unencrypted HTTP/2.
	protocols.SetUnencryptedHTTP2(true)
	s := &Server{cfg: cfg}
	s.http = &http.Server{
		Handler:           cfg.HTTP,
		Protocols:         &protocols,
		ReadHeaderTimeout: cfg.SniffTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: int(cfg.MaxConcurrentStreams),
			SendPingTimeout:      cfg.KeepaliveTime,
			PingTimeout:          cfg.KeepaliveTimeout,
		},
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			ctx = connContext(ctx, c)
			if cfg.ConnContext != nil {
				ctx = cfg.ConnContext(ctx, c)
			}
			return ctx
		},
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	return s
}

// Serve serves lis until Shutdown, and returns nil then; or the error that
// stopped it.
func (s *Server) Serve(lis net.Listener) error {
	if s.cfg.TLS != nil {
		tlsConfig := s.cfg.TLS.Clone()
		tlsConfig.NextProtos = []string{"h2", "http/1.1"}
		lis = tls.NewListener(lis, tlsConfig)
	}
	s.mu.Lock()
	s.lis = lis
	closed := s.closed
	s.mu.Unlock()
	if closed {
		lis.Close()
		return nil
	}
	m := cmux.New(s.sniffing.accepting(lis))
	m.SetReadTimeout(s.cfg.SniffTimeout)
	m.HandleError(func(err error) bool {
		var notMatched cmux.ErrNotMatched
		if errors.As(err, &notMatched) {
			return true // that connection is closed; serve on
		}
		if errors.Is(err, net.ErrClosed) {
			return false
		}
		// Out of file descriptors, say: accept again a moment later,
		// as net/http does.
		time.Sleep(5 * time.Millisecond)
		return true
	})
	grpcL := s.sniffing.handingOver(m.MatchWithWriters(s.matchGRPC))
	httpL := httpListener{Listener: s.sniffing.handingOver(m.Match(cmux.Any())), wrap: s.cfg.HTTPConn}

	errs := make(chan error, 3)
	go func() { errs <- s.cfg.GRPC.Serve(grpcL) }()
	go func() { errs <- s.http.Serve(httpL) }()
	go func() { errs <- m.Serve() }()
	var first error
	for range 3 {
		err := <-errs
		switch {
		case err == nil, errors.Is(err, grpc.ErrServerStopped), errors.Is(err, http.ErrServerClosed),
			errors.Is(err, net.ErrClosed), errors.Is(err, cmux.ErrListenerClosed), errors.Is(err, cmux.ErrServerClosed):
		case first == nil:
			first = err
			// One side failed: stop the others.
			s.closeListener()
		}
	}
	return first
}

// Shutdown stops accepting connections, and waits for the calls in
// progress on both sides to finish; when ctx ends first, it closes every
// connection. End long streams first (server.Server.Drain).
func (s *Server) Shutdown(ctx context.Context) error {
	s.closeListener()
	stopped := make(chan struct{})
	go func() {
		s.cfg.GRPC.GracefulStop()
		close(stopped)
	}()
	err := s.http.Shutdown(ctx)
	if errors.Is(err, net.ErrClosed) {
		// Its listener is a view of the one closeListener closed.
		err = nil
	}
	if err != nil {
		s.http.Close()
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		s.cfg.GRPC.Stop()
		<-stopped
		if err == nil {
			err = ctx.Err()
		}
	}
	return err
}

// Close closes the listener and every connection at once.
func (s *Server) Close() {
	s.closeListener()
	s.cfg.GRPC.Stop()
	s.http.Close()
}

// closeListener closes the listener, and the connections not yet handed to
// a side.
func (s *Server) closeListener() {
	s.mu.Lock()
	s.closed = true
	if s.lis != nil {
		s.lis.Close()
	}
	s.mu.Unlock()
	s.sniffing.closeAll()
}

// maxSniffBytes bounds what a connection may send before its first
// request's headers end: cmux buffers all of it.
const maxSniffBytes = 64 << 10

// matchGRPC tells whether a connection's first request is native gRPC in
// protobuf: HTTP/2 (ALPN h2 under TLS) whose first HEADERS say content-type
// application/grpc or application/grpc+proto (grpc-go's codec is protobuf
// whatever the subtype). Any other connection goes to the HTTP side, where
// connect-go serves gRPC too (and gRPC in JSON).
//
// A connection goes to one side for good: a client that sends native gRPC
// first, and then the Connect protocol or gRPC-Web on the same HTTP/2
// connection, gets 415 Unsupported Media Type from grpc-go for those. Such a
// client needs a connection per protocol (docs/http.md).
func (s *Server) matchGRPC(w io.Writer, r io.Reader) bool {
	deadline := time.Now().Add(s.cfg.SniffTimeout)
	conn, _ := w.(net.Conn)
	if tc, ok := conn.(*tls.Conn); ok {
		if err := tc.Handshake(); err != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
			return false
		}
	}
	r = io.LimitReader(r, maxSniffBytes)
	if !hasPrefix(r, []byte(http2.ClientPreface)) {
		return false
	}
	// The server's SETTINGS now, for the clients that wait for them
	// (settingsack.go says why net/http does not see their answer).
	if conn != nil {
		_ = conn.SetWriteDeadline(deadline)
		defer conn.SetWriteDeadline(time.Time{})
	}
	fr := http2.NewFramer(w, r)
	if err := fr.WriteSettings(); err != nil {
		return false
	}
	// The framer allocates a frame's payload before reading it: no more
	// than the SETTINGS just sent allow (RFC 9113's initial maximum).
	fr.SetMaxReadFrameSize(initialMaxFrameSize)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = maxSniffBytes
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return false
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			var ct string
			for _, hf := range f.RegularFields() {
				if hf.Name == "content-type" {
					ct = hf.Value
				}
			}
			return isGRPCProto(ct)
		case *http2.GoAwayFrame:
			return false
		}
	}
}

// initialMaxFrameSize is HTTP/2's SETTINGS_MAX_FRAME_SIZE until a server
// says otherwise.
const initialMaxFrameSize = 16 << 10

// isGRPCProto tells whether a content-type is gRPC's in protobuf:
// application/grpc, application/grpc+proto, either with parameters.
func isGRPCProto(contentType string) bool {
	ct, _, _ := strings.Cut(strings.ToLower(contentType), ";")
	ct = strings.TrimSpace(ct)
	return ct == "application/grpc" || ct == "application/grpc+proto"
}

// hasPrefix reads len(prefix) bytes of r, and tells whether they are
// prefix, stopping at the first that differs (a short HTTP/1.1 request
// must not wait for more bytes than it has).
func hasPrefix(r io.Reader, prefix []byte) bool {
	buf := make([]byte, len(prefix))
	for got := 0; got < len(prefix); {
		n, err := r.Read(buf[got:])
		if !bytes.Equal(buf[got:got+n], prefix[got:got+n]) {
			return false
		}
		got += n
		if err != nil && got < len(prefix) {
			return false
		}
	}
	return true
}

// connContext puts the connection's peer, with its TLS state, in the
// context of its HTTP requests, as grpc-go does for its calls.
func connContext(ctx context.Context, c net.Conn) context.Context {
	p := &peer.Peer{Addr: c.RemoteAddr(), LocalAddr: c.LocalAddr()}
	if tc := tlsConnOf(c); tc != nil {
		p.AuthInfo = tlsInfo(tc)
	}
	return peer.NewContext(ctx, p)
}

// tlsConnOf returns the TLS connection under c, if any: c is the
// listener's connection, as the matcher and the HTTP side wrapped it.
func tlsConnOf(c net.Conn) *tls.Conn {
	for range 16 { // a wrapper that unwraps to itself ends the search
		switch wrapped := c.(type) {
		case *tls.Conn:
			return wrapped
		case *settingsAckConn:
			c = wrapped.Conn
		case *readBufferedConn:
			c = wrapped.Conn
		case *cmux.MuxConn:
			c = wrapped.Conn
		case interface{ NetConn() net.Conn }: // Config.HTTPConn's
			c = wrapped.NetConn()
		default:
			return nil
		}
	}
	return nil
}

func tlsInfo(tc *tls.Conn) credentials.TLSInfo {
	return credentials.TLSInfo{
		State:          tc.ConnectionState(),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
	}
}

// Credentials returns the transport credentials of a Server's grpc.Server:
// they take each connection as the listener made it, and hand grpc-go its
// TLS state (credentials.TLSInfo) when it has one.
func Credentials() credentials.TransportCredentials { return passthrough{} }

type passthrough struct{}

func (passthrough) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("oneport: server credentials only")
}

func (passthrough) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if tc := tlsConnOf(c); tc != nil {
		return c, tlsInfo(tc), nil
	}
	return c, plaintextInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (passthrough) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "oneport"}
}

func (passthrough) Clone() credentials.TransportCredentials { return passthrough{} }

func (passthrough) OverrideServerName(string) error { return nil }

// plaintextInfo is the AuthInfo of a connection without TLS.
type plaintextInfo struct{ credentials.CommonAuthInfo }

func (plaintextInfo) AuthType() string { return "insecure" }
