// Package testpki makes certificate authorities and the certificates they
// sign, for tests of TLS serving, mutual TLS and certificate rotation. Keys
// are ECDSA P-256; certificates are valid from an hour ago to an hour from
// now.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// Pool holds Cert, for tls.Config's RootCAs or ClientCAs.
	Pool *x509.CertPool
}

// NewCA makes a self-signed CA named cn.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	setValidity(t, tmpl)
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
	return &CA{Cert: cert, Key: key, Pool: pool}
}

// Server issues a serving certificate for the IP addresses (default:
// 127.0.0.1).
func (ca *CA) Server(t testing.TB, ips ...string) tls.Certificate {
	t.Helper()
	if len(ips) == 0 {
		ips = []string{"127.0.0.1"}
	}
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "server"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	return ca.Issue(t, tmpl)
}

// Client issues a client certificate for user in groups, as Kubernetes
// reads them: the CommonName and the Organizations.
func (ca *CA) Client(t testing.TB, user string, groups ...string) tls.Certificate {
	t.Helper()
	return ca.Issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

// Issue signs tmpl, with its serial number, validity and key usage filled
// in, for a new key.
func (ca *CA) Issue(t testing.TB, tmpl *x509.Certificate) tls.Certificate {
	t.Helper()
	key := newKey(t)
	setValidity(t, tmpl)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// WriteCA writes the CA's certificate to dir/name as PEM and returns the
// path.
func (ca *CA) WriteCA(t testing.TB, dir, name string) string {
	t.Helper()
	return writePEM(t, filepath.Join(dir, name), "CERTIFICATE", ca.Cert.Raw)
}

// WritePair writes cert and its key to dir/name.pem and dir/name-key.pem
// as PEM and returns the paths.
func WritePair(t testing.TB, dir, name string, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", cert.Certificate[0]),
		writePEM(t, filepath.Join(dir, name+"-key.pem"), "PRIVATE KEY", key)
}

func writePEM(t testing.TB, path, blockType string, der []byte) string {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func setValidity(t testing.TB, tmpl *x509.Certificate) {
	t.Helper()
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = serial, time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
}
