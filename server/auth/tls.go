package auth

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// CertificateReloader serves a TLS certificate from files and reloads it
// when they change, so certificates rotate without a restart. Use its
// GetCertificate in a tls.Config.
type CertificateReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex // guards the fields below
	cert    *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
}

// fileStamp tells whether a file changed.
type fileStamp struct {
	modTime time.Time
	size    int64
}

// reloadCheckInterval bounds how often the files are looked at: at most
// once a second, on a TLS handshake.
const reloadCheckInterval = time.Second

// NewCertificateReloader loads the certificate and key, failing if they are
// not a valid pair.
func NewCertificateReloader(certFile, keyFile string, log *slog.Logger) (*CertificateReloader, error) {
	r := &CertificateReloader{certFile: certFile, keyFile: keyFile, log: log}
	stamp, err := r.stamps()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the TLS certificate: %w", err)
	}
	r.cert, r.stamp, r.checked = &cert, stamp, time.Now()
	return r, nil
}

func (r *CertificateReloader) stamps() ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, f := range []string{r.certFile, r.keyFile} {
		info, err := os.Stat(f)
		if err != nil {
			return out, err
		}
		out[i] = fileStamp{modTime: info.ModTime(), size: info.Size()}
	}
	return out, nil
}

// GetCertificate returns the current certificate, reloading the files
// first if they changed. A pair that does not load (say, the certificate is
// written but not yet its key) keeps the previous one until it does.
func (r *CertificateReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < reloadCheckInterval {
		return r.cert, nil
	}
	r.checked = time.Now()
	stamp, err := r.stamps()
	if err != nil || stamp == r.stamp {
		return r.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		r.log.Warn("the TLS certificate files changed but do not load yet; serving the previous certificate", "error", err)
		return r.cert, nil
	}
	r.cert, r.stamp = &cert, stamp
	r.log.Info("reloaded the TLS certificate", "file", r.certFile)
	return r.cert, nil
}
