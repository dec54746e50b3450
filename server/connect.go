package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/gen/informerhub/v1/informerhubv1connect"
	"github.com/informerhub/informerhub/informerhub"
	"github.com/informerhub/informerhub/server/cork"
)

// connectService serves the service's calls that come over HTTP (the
// Connect protocol, gRPC-Web, and gRPC that did not reach grpc-go) with
// the Server's own handlers: each call goes through the same interceptors
// (authentication, rate limit, metrics, logging, recovery) and the same
// handler as on grpc-go, on a grpc.ServerStream that sends through
// connect-go. So every rule of the service holds on every protocol, from
// one implementation; only the framing differs.
type connectService struct{ s *Server }

var _ informerhubv1connect.InformerHubServiceHandler = connectService{}

func (c connectService) Watch(ctx context.Context, req *connect.Request[informerhubv1.WatchRequest], stream *connect.ServerStream[informerhubv1.WatchResponse]) error {
	return c.serveStream(ctx, req, stream.Conn(), func(ss grpc.ServerStream) error {
		return c.s.Watch(req.Msg, &grpc.GenericServerStream[informerhubv1.WatchRequest, informerhubv1.WatchResponse]{ServerStream: ss})
	})
}

func (c connectService) Snapshot(ctx context.Context, req *connect.Request[informerhubv1.SnapshotRequest], stream *connect.ServerStream[informerhubv1.SnapshotResponse]) error {
	return c.serveStream(ctx, req, stream.Conn(), func(ss grpc.ServerStream) error {
		return c.s.Snapshot(req.Msg, &grpc.GenericServerStream[informerhubv1.SnapshotRequest, informerhubv1.SnapshotResponse]{ServerStream: ss})
	})
}

func (c connectService) WatchMany(ctx context.Context, req *connect.Request[informerhubv1.WatchManyRequest], stream *connect.ServerStream[informerhubv1.WatchManyResponse]) error {
	return c.serveStream(ctx, req, stream.Conn(), func(ss grpc.ServerStream) error {
		return c.s.WatchMany(req.Msg, &grpc.GenericServerStream[informerhubv1.WatchManyRequest, informerhubv1.WatchManyResponse]{ServerStream: ss})
	})
}

func (c connectService) Count(ctx context.Context, req *connect.Request[informerhubv1.CountRequest], stream *connect.ServerStream[informerhubv1.CountResponse]) error {
	return c.serveStream(ctx, req, stream.Conn(), func(ss grpc.ServerStream) error {
		return c.s.Count(req.Msg, &grpc.GenericServerStream[informerhubv1.CountRequest, informerhubv1.CountResponse]{ServerStream: ss})
	})
}

func (c connectService) ListResources(ctx context.Context, req *connect.Request[informerhubv1.ListResourcesRequest]) (*connect.Response[informerhubv1.ListResourcesResponse], error) {
	return serveUnary(ctx, c.s, req, c.s.ListResources)
}

func (c connectService) Digest(ctx context.Context, req *connect.Request[informerhubv1.DigestRequest]) (*connect.Response[informerhubv1.DigestResponse], error) {
	return serveUnary(ctx, c.s, req, c.s.Digest)
}

// serveUnary runs a unary call's handler through the interceptors, as
// gRPC runs it.
func serveUnary[Req, Resp any](ctx context.Context, s *Server, req *connect.Request[Req], handler func(context.Context, *Req) (*Resp, error)) (*connect.Response[Resp], error) {
	info := &grpc.UnaryServerInfo{Server: s, FullMethod: req.Spec().Procedure}
	resp, err := s.interceptors.runUnary(callContext(ctx, req), req.Msg, info, func(ctx context.Context, req any) (any, error) {
		return handler(ctx, req.(*Req))
	})
	if err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(resp.(*Resp)), nil
}

// serveStream runs a server-streaming call's handler through the
// interceptors on a stream of conn.
func (c connectService) serveStream(ctx context.Context, req connect.AnyRequest, conn connect.StreamingHandlerConn, handler func(grpc.ServerStream) error) error {
	stream := &connectStream{conn: conn, drain: c.s.cfg.StalledSendGrace}
	stream.control, _ = ctx.Value(responseControllerKey{}).(*http.ResponseController)
	stream.ctx = context.WithValue(callContext(ctx, req), cutterKey{}, stream)
	info := &grpc.StreamServerInfo{FullMethod: req.Spec().Procedure, IsServerStream: true}
	err := c.s.interceptors.runStream(c.s, stream, info, func(_ any, ss grpc.ServerStream) error { return handler(ss) })
	return connectError(err)
}

// connectCall is what a call over HTTP says about itself, in its context.
type connectCall struct {
	protocol string // connect.ProtocolConnect, ProtocolGRPCWeb or ProtocolGRPC
	json     bool   // its messages go in protobuf's JSON mapping
}

type connectCallKey struct{}

// protocolOf returns the protocol of a call: "grpc" for grpc-go's own.
func protocolOf(ctx context.Context) string {
	if call, ok := ctx.Value(connectCallKey{}).(connectCall); ok {
		return call.protocol
	}
	return connect.ProtocolGRPC
}

// wireJSON tells whether a call's messages go in protobuf's JSON mapping.
func wireJSON(ctx context.Context) bool {
	call, _ := ctx.Value(connectCallKey{}).(connectCall)
	return call.json
}

// callContext gives a call over HTTP the context a call over grpc-go has,
// for the interceptors and handlers: its headers as incoming metadata (the
// authorization header, above all), its peer (with the TLS state, when the
// listener put it there: see package oneport), its protocol and codec.
func callContext(ctx context.Context, req connect.AnyRequest) context.Context {
	md := make(metadata.MD, len(req.Header()))
	for name, values := range req.Header() {
		md[strings.ToLower(name)] = values
	}
	ctx = metadata.NewIncomingContext(ctx, md)
	if _, ok := peer.FromContext(ctx); !ok {
		ctx = peer.NewContext(ctx, &peer.Peer{Addr: addrOf(req.Peer().Addr)})
	}
	contentType := req.Header().Get("Content-Type")
	return context.WithValue(ctx, connectCallKey{}, connectCall{
		protocol: req.Peer().Protocol,
		json:     strings.HasSuffix(contentType, "+json") || strings.HasPrefix(contentType, "application/json"),
	})
}

// addrOf parses a peer's "host:port".
func addrOf(hostPort string) net.Addr {
	if ap, err := netip.ParseAddrPort(hostPort); err == nil {
		return net.TCPAddrFromAddrPort(ap)
	}
	return unparsedAddr(hostPort)
}

// unparsedAddr is a peer address that is not an IP and port.
type unparsedAddr string

func (a unparsedAddr) Network() string { return "tcp" }
func (a unparsedAddr) String() string  { return string(a) }

type responseControllerKey struct{}

// httpCall puts the ResponseController of each request's response in its
// context, so that a stream can cut off a send blocked on a client that
// stopped reading (connectStream.finish); and has connect-go write each
// message whole (envelopeWriter).
func (s *Server) httpCall(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), responseControllerKey{}, http.NewResponseController(w))
		ew := &envelopeWriter{ResponseWriter: w}
		if r.ProtoMajor == 1 {
			ew.conn = cork.ConnOf(ctx)
		}
		defer ew.finish()
		h.ServeHTTP(ew, r.WithContext(ctx))
	})
}

// connectStream is a grpc.ServerStream that sends through connect-go, so
// that the Server's handlers serve calls over HTTP unchanged. As on
// grpc-go, only the handler's goroutine sends, and it returns only once its
// send has: net/http forbids writing once the handler has returned.
//
// A stream that must end while its send is blocked on a client that
// stopped reading (see WriteStatus, its cutter) ends when the client reads
// on, within drain: its status then follows what was in flight, as over
// HTTP it can only come after it (in the body, or in trailers after the
// body's last frame). grpc-go queues its status behind what was in flight
// too, but frees the handler at once.
type connectStream struct {
	ctx     context.Context
	conn    connect.StreamingHandlerConn
	control *http.ResponseController // nil: sends cannot be cut off
	drain   time.Duration            // Config.StalledSendGrace
}

func (cs *connectStream) Context() context.Context { return cs.ctx }

func (cs *connectStream) SetHeader(md metadata.MD) error {
	copyMetadata(cs.conn.ResponseHeader(), md)
	return nil
}

// SendHeader sends the response headers at once: connect-go would send
// them with the first message.
func (cs *connectStream) SendHeader(md metadata.MD) error {
	copyMetadata(cs.conn.ResponseHeader(), md)
	return cs.SendMsg(nil)
}

func (cs *connectStream) SetTrailer(md metadata.MD) { copyMetadata(cs.conn.ResponseTrailer(), md) }

func (cs *connectStream) SendMsg(m any) error { return cs.conn.Send(m) }

// RecvMsg has nothing to receive: connect-go has read a server stream's
// one request before the handler runs.
func (cs *connectStream) RecvMsg(any) error { return io.EOF }

// WriteStatus ends a stream whose send is blocked on a client that stopped
// reading. It cannot write the status ahead of the blocked send: it gives
// the client drain to read on, after which a write deadline fails the send
// (and, over HTTP/1.1, closes the connection). A client that reads on
// within it receives what was in flight, then the status the handler
// returns, with the token to resume from; one that does not gets a broken
// stream, and learns why when it calls again (PERMISSION_DENIED, or a
// resume from its last token). drain is short: the handler, its
// subscription and the message in flight are held meanwhile, and Drain
// waits for it.
func (cs *connectStream) WriteStatus(*status.Status) error {
	if cs.control == nil {
		return nil
	}
	return cs.control.SetWriteDeadline(time.Now().Add(cs.drain))
}

func copyMetadata(h http.Header, md metadata.MD) {
	for name, values := range md {
		for _, v := range values {
			h.Add(name, v)
		}
	}
}

// connectError converts a status from the Server's handlers (toStatus made
// it) into connect-go's error, its details included.
func connectError(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	converted := connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	for _, d := range st.Proto().GetDetails() {
		if detail, err := connect.NewErrorDetail(d); err == nil {
			converted.AddDetail(detail)
		}
	}
	return converted
}

// connectCodec is connect-go's protobuf codec ("proto"), or its JSON
// codec ("json": protobuf's JSON mapping, with connect-go's options),
// except that an *informerhub.Event is sent as the WatchResponse bytes the
// hub encoded once for all its subscribers of that wire encoding (as codec
// does for grpc-go), and an *informerhub.ManyEvent as a WatchManyResponse
// around them. It appends them to connect-go's buffer: connect-go
// reuses the bytes a plain Marshal returns, which must stay the event's.
type connectCodec struct{ json bool }

func (c connectCodec) Name() string {
	if c.json {
		return "json"
	}
	return "proto"
}

func (c connectCodec) Marshal(m any) ([]byte, error) { return c.MarshalAppend(nil, m) }

func (c connectCodec) MarshalAppend(b []byte, m any) ([]byte, error) {
	if out, ok := m.(*outgoing); ok {
		b, err := c.MarshalAppend(b, out.msg)
		out.handed()
		return b, err
	}
	switch v := m.(type) {
	case *informerhub.Event:
		encoded, err := eventEncoding(v, c.json)
		return appendBuffers(b, encoded), err
	case *informerhub.ManyEvent:
		encoded, err := manyResponse(v, c.json)
		defer encoded.Free()
		return appendBuffers(b, encoded), err
	case *informerhub.Counts:
		encoded, err := countsEncoding(v, c.json)
		return appendBuffers(b, encoded), err
	}
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("cannot encode a %T", m)
	}
	if c.json {
		return protojson.MarshalOptions{}.MarshalAppend(b, msg)
	}
	return proto.MarshalOptions{}.MarshalAppend(b, msg)
}

func (c connectCodec) Unmarshal(b []byte, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("cannot decode into a %T", m)
	}
	if c.json {
		return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, msg)
	}
	return proto.Unmarshal(b, msg)
}

func appendBuffers(b []byte, bufs mem.BufferSlice) []byte {
	for _, buf := range bufs {
		b = append(b, buf.ReadOnlyData()...)
	}
	return b
}
