package amqpsink_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/internal/brokerproc"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// nodeMaxMessageSize is the max_message_size of the private node, so that
// a too large message is cheap to make.
const nodeMaxMessageSize = 1 << 20

// privNode is the test binary's private RabbitMQ node (started on first
// use, stopped by TestMain): for the faults that need the node's own
// configuration (max_message_size, a TLS listener, users and
// permissions, closing connections with rabbitmqctl) without touching the
// shared server. Tests that use it do not stop or block it; the restart
// test has a node of its own.
type privNode struct {
	*brokerproc.RabbitMQ
	tlsPort int
	roots   *x509.CertPool // trusts the TLS listener's certificate
}

var (
	nodeOnce sync.Once
	node     *privNode
	nodeErr  error
	nodeDirs []string
)

func privateNode(t testing.TB) *privNode {
	t.Helper()
	nodeOnce.Do(func() { node, nodeErr = startPrivateNode() })
	if nodeErr != nil {
		testenv.Unavailable(t, "RabbitMQ", "OUTBOX_RABBITMQ_BIN", nodeErr)
	}
	return node
}

func startPrivateNode() (*privNode, error) {
	if _, _, err := brokerproc.RabbitMQServerBin(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "amqpsink-node-")
	if err != nil {
		return nil, err
	}
	nodeDirs = append(nodeDirs, dir)
	tlsPort, err := brokerproc.PickPort()
	if err != nil {
		return nil, err
	}
	roots, err := writeCerts(dir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := brokerproc.StartRabbitMQ(ctx, dir,
		"max_message_size = "+strconv.Itoa(nodeMaxMessageSize),
		// The broker asks for no heartbeat, so a client asking for none
		// (heartbeat=0) gets none; the sink's default (3s) still applies.
		"heartbeat = 0",
		"listeners.ssl.default = 127.0.0.1:"+strconv.Itoa(tlsPort),
		"ssl_options.cacertfile = "+filepath.Join(dir, "ca.pem"),
		"ssl_options.certfile = "+filepath.Join(dir, "cert.pem"),
		"ssl_options.keyfile = "+filepath.Join(dir, "key.pem"),
		"ssl_options.verify = verify_none",
		"ssl_options.fail_if_no_peer_cert = false",
	)
	if err != nil {
		return nil, err
	}
	return &privNode{RabbitMQ: r, tlsPort: tlsPort, roots: roots}, nil
}

// stopPrivateNode stops the private nodes the binary started (TestMain).
func stopPrivateNode() {
	if node != nil {
		node.Kill()
	}
	for _, d := range nodeDirs {
		_ = os.RemoveAll(d)
	}
}

// closeConnection closes, from the broker (320 CONNECTION_FORCED), the
// client connection made from the local address local.
func (n *privNode) closeConnection(local string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := n.Ctl(ctx, "list_connections", "pid", "name", "-q", "--no-table-headers")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(out, "\n") {
		pid, name, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok && strings.HasPrefix(name, local+" ->") {
			_, err := n.Ctl(ctx, "close_connection", pid, "closed by a test")
			return err
		}
	}
	return fmt.Errorf("no connection from %s in %q", local, out)
}

// tlsURL is the node's amqps URL, and the TLS configuration that trusts it.
func (n *privNode) tlsURL() (string, *tls.Config) {
	return "amqps://guest:guest@localhost:" + strconv.Itoa(n.tlsPort) + "/", &tls.Config{RootCAs: n.roots, ServerName: "localhost"}
}

// writeCerts writes a self-signed certificate for localhost and 127.0.0.1
// (ca.pem is the same certificate) and its key into dir.
func writeCerts(dir string) (*x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	for name, b := range map[string][]byte{
		"ca.pem": certPEM, "cert.pem": certPEM,
		"key.pem": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return nil, err
		}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return pool, nil
}
