package testredis

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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

// TLSServer is a redis-server that speaks only TLS and requires a client
// certificate. The PEM files are a test CA (CAFile) that signed the server's
// certificate (for 127.0.0.1) and a client certificate (CertFile, KeyFile).
type TLSServer struct {
	*Server
	CAFile, CertFile, KeyFile string
}

// StartTLS runs a TLS redis-server until the test ends.
func StartTLS(t testing.TB) *TLSServer {
	t.Helper()
	bin := lookPath(t, "redis-server")
	dir := t.TempDir()
	caKey, ca := newCert(t, nil, nil, "test CA")
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	writeKey := func(name string, k *ecdsa.PrivateKey) string {
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name, "EC PRIVATE KEY", der)
	}
	s := &TLSServer{CAFile: write("ca.pem", "CERTIFICATE", ca.Raw)}
	srvKey, srv := newCert(t, ca, caKey, "127.0.0.1")
	cliKey, cli := newCert(t, ca, caKey, "client")
	s.CertFile, s.KeyFile = write("client.pem", "CERTIFICATE", cli.Raw), writeKey("client-key.pem", cliKey)
	s.Server = newServer(t, bin, "--tls-cert-file", write("server.pem", "CERTIFICATE", srv.Raw),
		"--tls-key-file", writeKey("server-key.pem", srvKey), "--tls-ca-cert-file", s.CAFile, "--tls-auth-clients", "yes")
	s.tls = true
	s.Start()
	return s
}

// newCert makes a certificate for name signed by parent (self-signed CA
// when parent is nil).
func newCert(t testing.TB, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, name string) (*ecdsa.PrivateKey, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert
}
