package relaycmd

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/clitest"
)

// TestRelayAMQPTLS: an amqps:// --sink-url dials TLS with the
// --amqp-tls-* flags. A TLS server that requires a client certificate
// (it speaks no AMQP: the handshake is what is tested) sees a verified
// client certificate with --amqp-tls-cert and --amqp-tls-key, and none
// without; the client refuses a server its CA does not vouch for, or
// whose certificate is not for --amqp-tls-server-name. No password of the
// URL shows in the errors.
func TestRelayAMQPTLS(t *testing.T) {
	t.Parallel()
	const pass = "Amqp-Pa55-tls-z9"
	pki := clitest.NewPKI(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{pki.Server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pki.Pool, MinVersion: tls.VersionTLS12,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	handshakes := make(chan error, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			err = c.(*tls.Conn).Handshake()
			if err == nil && len(c.(*tls.Conn).ConnectionState().PeerCertificates) == 0 {
				err = net.ErrClosed
			}
			handshakes <- err
			_ = c.Close()
		}
	}()
	url := "amqps://relay:" + pass + "@" + ln.Addr().String() + "/"
	dial := func(c RelayCmd) (clientErr, serverErr error) {
		t.Helper()
		c.SinkURL, c.AMQPPublishTimeout = url, time.Second
		if problems := c.amqpProblems(); len(problems) > 0 {
			t.Fatalf("the flags do not check: %v", problems)
		}
		s, err := c.amqpSink()
		if err == nil {
			_ = s.close()
			t.Fatal("an AMQP connection to a server that speaks no AMQP succeeded")
		}
		if strings.Contains(err.Error(), pass) {
			t.Errorf("the error shows the password: %v", err)
		}
		select {
		case serverErr = <-handshakes:
		case <-time.After(10 * time.Second):
			t.Fatal("the server saw no connection")
		}
		return err, serverErr
	}
	both := AMQPFlags{AMQPTLSCA: pki.CAFile, AMQPTLSCert: pki.ClientCertFile, AMQPTLSKey: pki.ClientKeyFile}
	if _, serverErr := dial(RelayCmd{AMQPFlags: both}); serverErr != nil {
		t.Errorf("with the CA and a client certificate, the server's handshake failed: %v", serverErr)
	}
	if _, serverErr := dial(RelayCmd{AMQPFlags: AMQPFlags{AMQPTLSCA: pki.CAFile}}); serverErr == nil {
		t.Error("without a client certificate, the server's handshake succeeded")
	}
	named := both
	named.AMQPTLSServerName = "mq.example"
	if clientErr, serverErr := dial(RelayCmd{AMQPFlags: named}); serverErr == nil || !strings.Contains(clientErr.Error(), "mq.example") {
		t.Errorf("a certificate not for --amqp-tls-server-name was accepted: %v / %v", clientErr, serverErr)
	}
	if _, serverErr := dial(RelayCmd{AMQPFlags: AMQPFlags{AMQPTLSCert: pki.ClientCertFile, AMQPTLSKey: pki.ClientKeyFile}}); serverErr == nil {
		t.Error("the test CA's certificate was verified against the system's roots")
	}

	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flags AMQPFlags
		want  string
	}{
		{AMQPFlags{AMQPTLSCA: filepath.Join(t.TempDir(), "missing.pem")}, "--amqp-tls-ca"},
		{AMQPFlags{AMQPTLSCA: notPEM}, "holds no PEM certificate"},
		{AMQPFlags{AMQPTLSCert: notPEM, AMQPTLSKey: notPEM}, "--amqp-tls-cert and --amqp-tls-key"},
	} {
		c := RelayCmd{SinkURL: url, AMQPFlags: tc.flags}
		if _, err := c.amqpSink(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("amqpSink() error = %v, want one naming %q", err, tc.want)
		}
	}
}

// TestRelayAMQPOptions: the RabbitMQ flags map onto amqpsink.Options:
// the exchange from the prefix and the map, the routing key template, and
// the sink's defaults where no flag is set.
func TestRelayAMQPOptions(t *testing.T) {
	o := (&RelayCmd{AMQPFlags: AMQPFlags{AMQPExchangePrefix: "x.", AMQPExchangeMap: map[string]string{"audit": "audit-x"}, AMQPRoutingKey: "{topic}.{key}"}}).AMQPOptions()
	for topic, want := range map[string]string{"orders": "x.orders", "audit": "audit-x"} {
		if got := o.Exchange(outbox.Entry{Topic: topic}); got != want {
			t.Errorf("topic %s: exchange %q, want %q", topic, got, want)
		}
	}
	if o.RoutingKeyTemplate != "{topic}.{key}" || o.RoutingKey != nil {
		t.Errorf("routing key: template %q, function set %v", o.RoutingKeyTemplate, o.RoutingKey != nil)
	}
	if d := (&RelayCmd{}).AMQPOptions(); d.Exchange != nil || d.RoutingKeyTemplate != "" || d.Channels != 0 || d.MaxPending != 0 {
		t.Errorf("without flags, the options are not the sink's defaults: %+v", d)
	}
}
