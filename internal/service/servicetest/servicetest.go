// Package servicetest starts secured NATS servers for tests of the
// connection settings (service.Security): a throw-away certificate
// authority with server and client certificates for 127.0.0.1, and an
// embedded nats-server with TLS and authentication.
package servicetest

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

	"github.com/nats-io/nats-server/v2/server"
)

// PKI is a certificate authority and what it signed, as PEM files in Dir.
type PKI struct {
	Dir string
	// CA is the authority's certificate; Pool holds it.
	CA   string
	Pool *x509.CertPool
	// ClientCert and ClientKey are a client certificate the authority
	// signed and its key.
	ClientCert, ClientKey string
	// Server is a certificate for 127.0.0.1 and localhost the authority
	// signed.
	Server tls.Certificate
}

// NewPKI makes a certificate authority named name and its server and
// client certificates under a new temporary directory.
func NewPKI(t testing.TB, name string) *PKI {
	t.Helper()
	p := &PKI{Dir: t.TempDir(), Pool: x509.NewCertPool()}
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p.Pool.AddCert(ca)
	p.CA = p.write(t, "ca.pem", "CERTIFICATE", caDER)

	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	srvDER, srvKey := leaf(2, "server", x509.ExtKeyUsageServerAuth)
	p.Server = tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}
	cliDER, cliKey := leaf(3, "client", x509.ExtKeyUsageClientAuth)
	p.ClientCert = p.write(t, "client.pem", "CERTIFICATE", cliDER)
	keyDER, err := x509.MarshalECPrivateKey(cliKey)
	if err != nil {
		t.Fatal(err)
	}
	p.ClientKey = p.write(t, "client-key.pem", "EC PRIVATE KEY", keyDER)
	return p
}

// ServerTLS is the server side's TLS configuration: the server
// certificate, and with clientAuth a client certificate this authority
// signed is required.
func (p *PKI) ServerTLS(clientAuth bool) *tls.Config {
	cfg := &tls.Config{Certificates: []tls.Certificate{p.Server}, MinVersion: tls.VersionTLS12}
	if clientAuth {
		cfg.ClientCAs, cfg.ClientAuth = p.Pool, tls.RequireAndVerifyClientCert
	}
	return cfg
}

func (p *PKI) write(t testing.TB, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.Dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// StartNATS starts an embedded nats-server with JetStream (memory and a
// temporary store) on a free loopback port with the authentication and
// TLS of opts (Users, Nkeys, Authorization, TrustedOperators, TLSConfig,
// ...), and shuts it down at the end of the test.
func StartNATS(t testing.TB, opts server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.JetStream, opts.StoreDir = true, t.TempDir()
	opts.NoLog, opts.NoSigs = true, true
	if opts.TLSConfig != nil {
		opts.TLS = true
		opts.TLSVerify = opts.TLSConfig.ClientAuth == tls.RequireAndVerifyClientCert
		opts.TLSTimeout = 5
	}
	s, err := server.NewServer(&opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		t.Fatal("nats-server: not ready after 30s")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Addr is the server's client address, host:port, for URLs of any scheme
// and with or without user info.
func Addr(s *server.Server) string { return s.Addr().String() }
