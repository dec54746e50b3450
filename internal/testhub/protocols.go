package testhub

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
	"github.com/informerhub/informerhub/gen/informerhub/v1/informerhubv1connect"
)

// Protocol is one way a client reaches the hub's port.
type Protocol struct {
	Name string
	Dial func(t testing.TB, addr string) informerhubv1.InformerHubServiceClient
}

// Protocols are every protocol and HTTP version the hub serves: native
// gRPC (grpc-go's transport), and connect-go's clients of the Connect
// protocol and gRPC-Web, in JSON and binary, over HTTP/1.1 and h2c.
var Protocols = []Protocol{
	{"grpc", func(t testing.TB, addr string) informerhubv1.InformerHubServiceClient {
		return informerhubv1.NewInformerHubServiceClient(Dial(t, addr))
	}},
	{"connect+json/http1.1", ConnectDialer(HTTP1, connect.WithProtoJSON())},
	{"connect+proto/h2c", ConnectDialer(H2C)},
	{"grpcweb+proto/http1.1", ConnectDialer(HTTP1, connect.WithGRPCWeb())},
	{"grpcweb+json/h2c", ConnectDialer(H2C, connect.WithGRPCWeb(), connect.WithProtoJSON())},
}

// Dial is a plaintext gRPC connection to addr, closed when the test ends.
func Dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// HTTP1 and H2C make an HTTP client of one protocol version, with
// connections of its own.
func HTTP1() *http.Client {
	var p http.Protocols
	p.SetHTTP1(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

func H2C() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// ConnectDialer dials the hub with connect-go, through an HTTP client of
// httpClient's making, with opts (the protocol, the codec).
func ConnectDialer(httpClient func() *http.Client, opts ...connect.ClientOption) func(testing.TB, string) informerhubv1.InformerHubServiceClient {
	return func(t testing.TB, addr string) informerhubv1.InformerHubServiceClient {
		c := httpClient()
		t.Cleanup(c.CloseIdleConnections)
		return ConnectClient{informerhubv1connect.NewInformerHubServiceClient(c, "http://"+addr, opts...)}
	}
}

// ConnectOverTLS is a connect-go client of the hub at addr over TLS: with
// HTTP/2 (ALPN h2), or HTTP/1.1 when http1.
func ConnectOverTLS(t testing.TB, addr string, tlsConfig *tls.Config, http1 bool, opts ...connect.ClientOption) informerhubv1.InformerHubServiceClient {
	var p http.Protocols
	p.SetHTTP1(http1)
	p.SetHTTP2(!http1)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig, Protocols: &p}}
	t.Cleanup(c.CloseIdleConnections)
	return ConnectClient{informerhubv1connect.NewInformerHubServiceClient(c, "https://"+addr, opts...)}
}

// ConnectClient is a connect-go client with the interface of the gRPC
// client, so that the same test reads every protocol: gRPC metadata goes
// as HTTP headers, and connect-go's errors come back as gRPC statuses with
// their details.
type ConnectClient struct {
	C informerhubv1connect.InformerHubServiceClient
}

var _ informerhubv1.InformerHubServiceClient = ConnectClient{}

func connectRequest[T any](ctx context.Context, msg *T) *connect.Request[T] {
	req := connect.NewRequest(msg)
	md, _ := metadata.FromOutgoingContext(ctx)
	for name, values := range md {
		for _, v := range values {
			req.Header().Add(name, v)
		}
	}
	return req
}

func (c ConnectClient) ListResources(ctx context.Context, in *informerhubv1.ListResourcesRequest, _ ...grpc.CallOption) (*informerhubv1.ListResourcesResponse, error) {
	resp, err := c.C.ListResources(ctx, connectRequest(ctx, in))
	if err != nil {
		return nil, GRPCStatus(err)
	}
	return resp.Msg, nil
}

func (c ConnectClient) Digest(ctx context.Context, in *informerhubv1.DigestRequest, _ ...grpc.CallOption) (*informerhubv1.DigestResponse, error) {
	resp, err := c.C.Digest(ctx, connectRequest(ctx, in))
	if err != nil {
		return nil, GRPCStatus(err)
	}
	return resp.Msg, nil
}

func (c ConnectClient) Watch(ctx context.Context, in *informerhubv1.WatchRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[informerhubv1.WatchResponse], error) {
	return connectStream(ctx, in, c.C.Watch)
}

func (c ConnectClient) Snapshot(ctx context.Context, in *informerhubv1.SnapshotRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[informerhubv1.SnapshotResponse], error) {
	return connectStream(ctx, in, c.C.Snapshot)
}

func (c ConnectClient) WatchMany(ctx context.Context, in *informerhubv1.WatchManyRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[informerhubv1.WatchManyResponse], error) {
	return connectStream(ctx, in, c.C.WatchMany)
}

func (c ConnectClient) Count(ctx context.Context, in *informerhubv1.CountRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[informerhubv1.CountResponse], error) {
	return connectStream(ctx, in, c.C.Count)
}

func connectStream[Req, Resp any](ctx context.Context, in *Req,
	call func(context.Context, *connect.Request[Req]) (*connect.ServerStreamForClient[Resp], error)) (grpc.ServerStreamingClient[Resp], error) {
	stream, err := call(ctx, connectRequest(ctx, in))
	if err != nil {
		return nil, GRPCStatus(err)
	}
	return &connectStreamClient[Resp]{ctx: ctx, stream: stream}, nil
}

// connectStreamClient reads a connect-go server stream as a gRPC one.
type connectStreamClient[T any] struct {
	grpc.ClientStream // not used: panics if called
	ctx               context.Context
	stream            *connect.ServerStreamForClient[T]
	// peeked is a response Header read to reach the headers.
	peeked *T
	err    error
}

func (s *connectStreamClient[T]) Recv() (*T, error) {
	if s.peeked != nil {
		msg := s.peeked
		s.peeked = nil
		return msg, nil
	}
	if s.err != nil {
		return nil, s.err
	}
	if s.stream.Receive() {
		return s.stream.Msg(), nil
	}
	if err := s.stream.Err(); err != nil {
		return nil, GRPCStatus(err)
	}
	return nil, io.EOF
}

// Header returns the response headers; connect-go has them once the first
// response (or the end) has been read.
func (s *connectStreamClient[T]) Header() (metadata.MD, error) {
	if s.peeked == nil && s.err == nil {
		s.peeked, s.err = s.Recv()
		if s.err != nil && s.err != io.EOF {
			return nil, s.err
		}
	}
	md := metadata.MD{}
	for name, values := range s.stream.ResponseHeader() {
		md[strings.ToLower(name)] = values
	}
	return md, nil
}

func (s *connectStreamClient[T]) Context() context.Context { return s.ctx }

func (s *connectStreamClient[T]) CloseSend() error { return nil }

// GRPCStatus converts a connect-go error into the gRPC status it stands
// for, with its details.
func GRPCStatus(err error) error {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return status.Error(codes.Unknown, err.Error())
	}
	st := &spb.Status{Code: int32(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return status.FromProto(st).Err()
}
