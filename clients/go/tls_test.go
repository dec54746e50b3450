package hubclient_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	hubclient "github.com/informerhub/informerhub/clients/go"
	informerhubv1 "github.com/informerhub/informerhub/gen/informerhub/v1"
)

// selfSigned returns a certificate for 127.0.0.1, and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hub"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// authHub answers ListResources with the bearer token it was sent as kind.
type authHub struct {
	informerhubv1.UnimplementedInformerHubServiceServer
}

func (authHub) ListResources(ctx context.Context, _ *informerhubv1.ListResourcesRequest) (*informerhubv1.ListResourcesResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	return &informerhubv1.ListResourcesResponse{Resources: []*informerhubv1.Resource{{Kind: md.Get("authorization")[0]}}}, nil
}

func TestTLSAndBearerToken(t *testing.T) {
	cert, pool := selfSigned(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&cert)))
	informerhubv1.RegisterInformerHubServiceServer(g, authHub{})
	go g.Serve(lis) //nolint:errcheck // ends with Stop
	defer g.Stop()

	client, err := hubclient.New([]string{lis.Addr().String()},
		hubclient.WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), hubclient.WithBearerToken("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	resources, err := client.ListResources(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := resources[0].Kind; got != "Bearer s3cret" {
		t.Fatalf("the hub received authorization %q", got)
	}

	// Without the CA, the hub's certificate is not trusted.
	untrusting, err := hubclient.New([]string{lis.Addr().String()}, hubclient.WithBearerToken("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer untrusting.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := untrusting.ListResources(ctx, ""); err == nil {
		t.Fatal("a hub with an untrusted certificate was accepted")
	}
}
