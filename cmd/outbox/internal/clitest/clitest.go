// Package clitest holds the fixtures the outbox command's tests share:
// seeded outboxes and a test PKI.
package clitest

import (
	"context"
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
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

// KafkaHint is the fix hint the Kafka sink appends to an unknown-topic
// error; the default parked output must keep it readable.
const KafkaHint = "(the topic does not exist and was not created automatically; create it, then requeue the parked entry)"

// LongError is a parked entry's error longer than the parked list shows,
// with the Kafka sink's hint at its end and a marker in its middle.
var LongError = "kafkasink: publish entry e2: UNKNOWN_TOPIC_OR_PARTITION: This server does not host this topic-partition. " +
	strings.Repeat("détail ", 40) + "MIDDLE-MARKER " + strings.Repeat("détail ", 10) + KafkaHint

// SeedAdmin appends six entries to a two-partition outbox and parks three
// of them through the SPI:
//
//	e0 orders/k0   pending, due, JSON payload, a header
//	e1 orders/k1   parked, "broker said\nno: e1"
//	e2 payments/k2 parked, longError
//	e3 orders/k3   parked, "timeout"
//	e4 orders/k4   pending, due, binary payload
//	e5 orders/k5   pending, scheduled an hour ahead (not due)
func SeedAdmin(t *testing.T, store outbox.Store, appendFn func(...outbox.Entry) error) {
	t.Helper()
	ctx := context.Background()
	entries := []outbox.Entry{
		{ID: "e0", Topic: "orders", Key: "k0", Payload: []byte(`{"order":42,"items":["a","b"]}`), Headers: map[string]string{"source": "checkout"}},
		{ID: "e1", Topic: "orders", Key: "k1", Payload: []byte("hello")},
		{ID: "e2", Topic: "payments", Key: "k2"},
		{ID: "e3", Topic: "orders", Key: "k3"},
		{ID: "e4", Topic: "orders", Key: "k4", Payload: []byte{0, 1, 2, 0xff, 'x'}},
		{ID: "e5", Topic: "orders", Key: "k5", NotBefore: time.Now().Add(time.Hour)},
	}
	if err := appendFn(entries...); err != nil {
		t.Fatal(err)
	}
	errs := map[string]string{"e1": "broker said\nno: e1", "e2": LongError, "e3": "timeout"}
	for p := range store.Partitions() {
		lease, err := store.AcquireLease(ctx, p, "seeder", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := store.FindPendingBatch(ctx, lease, 10)
		if err != nil {
			t.Fatal(err)
		}
		var fails []outbox.Failure
		var rest []string
		for _, e := range batch {
			if msg, ok := errs[e.ID]; ok {
				fails = append(fails, outbox.Failure{ID: e.ID, Error: msg, Park: true})
			} else {
				rest = append(rest, e.ID)
			}
		}
		if err := store.MarkFailed(ctx, lease, fails); err != nil {
			t.Fatal(err)
		}
		if err := store.Release(ctx, lease, rest); err != nil {
			t.Fatal(err)
		}
		if err := store.ReleaseLease(ctx, lease); err != nil {
			t.Fatal(err)
		}
	}
}

// PKI is a CA, a server certificate for 127.0.0.1 and a client
// certificate, as PEM files and parsed.
type PKI struct {
	CAFile, CertFile, KeyFile, ClientCertFile, ClientKeyFile string
	// Server is the server certificate; Pool holds the CA.
	Server tls.Certificate
	Pool   *x509.CertPool
}

// NewPKI makes a PKI in a temporary directory of t.
func NewPKI(t *testing.T) PKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "outbox test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64, name string, usage x509.ExtKeyUsage, ips []net.IP) (string, string, tls.Certificate) {
		key := newKey()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IPAddresses: ips,
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile := write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", keyDER)
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		return certFile, keyFile, pair
	}
	p := PKI{CAFile: write("ca.pem", "CERTIFICATE", caDER), Pool: x509.NewCertPool()}
	p.Pool.AddCert(ca)
	p.CertFile, p.KeyFile, p.Server = issue(2, "broker", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	p.ClientCertFile, p.ClientKeyFile, _ = issue(3, "client", x509.ExtKeyUsageClientAuth, nil)
	return p
}
