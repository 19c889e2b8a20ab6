package relaycmd

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/clitest"
)

// embeddedNATS starts an in-process nats-server on a random loopback port
// with opts (JetStream off: connecting is what is tested here).
func embeddedNATS(t *testing.T, opts server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", server.RANDOM_PORT, true, true
	srv, err := server.NewServer(&opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("the embedded nats-server did not get ready within 10s")
	}
	return srv
}

// writeFile writes a file of the test's own and returns its path.
func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRelayNATSAuthentication connects the relay's NATS sink (natsSink:
// the flags' nats.go options through natssink.Dial) to servers that
// require each kind of authentication the flags offer, and TLS with a
// client certificate; the wrong secret is refused, and no error shows it.
func TestRelayNATSAuthentication(t *testing.T) {
	t.Parallel()
	const pass, token, wrong = "Nats-Pa55-relay-x1", "Nats-T0ken-relay-x2", "Wrong-Secret-x3"
	connect := func(t *testing.T, c RelayCmd) error {
		t.Helper()
		c.NATSPublishTimeout = time.Second
		if problems := c.natsProblems(); len(problems) > 0 {
			t.Fatalf("the flags do not check: %v", problems)
		}
		s, err := c.natsSink()
		if err == nil {
			_ = s.close()
			return nil
		}
		for _, secret := range []string{pass, token, wrong} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows a secret: %v", err)
			}
		}
		return err
	}
	check := func(t *testing.T, good, bad RelayCmd) {
		t.Helper()
		if err := connect(t, good); err != nil {
			t.Errorf("connecting with the right credentials: %v", err)
		}
		if err := connect(t, bad); err == nil {
			t.Error("connecting with the wrong credentials succeeded")
		}
	}
	t.Run("UserPasswordFlags", func(t *testing.T) {
		t.Parallel()
		url := embeddedNATS(t, server.Options{Username: "relay", Password: pass}).ClientURL()
		check(t, RelayCmd{SinkURL: url, NATSFlags: NATSFlags{NATSUser: "relay", NATSPassword: pass}},
			RelayCmd{SinkURL: url, NATSFlags: NATSFlags{NATSUser: "relay", NATSPassword: wrong}})
	})
	t.Run("UserPasswordInURL", func(t *testing.T) {
		t.Parallel()
		url := embeddedNATS(t, server.Options{Username: "relay", Password: pass}).ClientURL()
		check(t, RelayCmd{SinkURL: strings.Replace(url, "nats://", "nats://relay:"+pass+"@", 1)},
			RelayCmd{SinkURL: strings.Replace(url, "nats://", "nats://relay:"+wrong+"@", 1)})
	})
	t.Run("TokenFlag", func(t *testing.T) {
		t.Parallel()
		url := embeddedNATS(t, server.Options{Authorization: token}).ClientURL()
		check(t, RelayCmd{SinkURL: url, NATSFlags: NATSFlags{NATSToken: token}}, RelayCmd{SinkURL: url, NATSFlags: NATSFlags{NATSToken: wrong}})
	})
	t.Run("TokenInURL", func(t *testing.T) {
		t.Parallel()
		url := embeddedNATS(t, server.Options{Authorization: token}).ClientURL()
		check(t, RelayCmd{SinkURL: strings.Replace(url, "nats://", "nats://"+token+"@", 1)}, RelayCmd{SinkURL: url})
	})
	t.Run("NKey", func(t *testing.T) {
		t.Parallel()
		user, _ := nkeys.CreateUser()
		pub, _ := user.PublicKey()
		seed, _ := user.Seed()
		other, _ := nkeys.CreateUser()
		otherSeed, _ := other.Seed()
		url := embeddedNATS(t, server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}}).ClientURL()
		check(t, RelayCmd{SinkURL: url, NATSFlags: NATSFlags{NATSNKey: writeFile(t, "user.nk", seed)}},
			RelayCmd{SinkURL: url, NATSFlags: NATSFlags{NATSNKey: writeFile(t, "other.nk", otherSeed)}})
		if err := connect(t, RelayCmd{SinkURL: url, NATSFlags: NATSFlags{NATSNKey: filepath.Join(t.TempDir(), "missing.nk")}}); err == nil || !strings.Contains(err.Error(), "--nats-nkey") {
			t.Errorf("a missing --nats-nkey file: %v; want an error naming the flag", err)
		}
	})
	t.Run("Creds", func(t *testing.T) {
		t.Parallel()
		opts, creds, foreign := operatorMode(t)
		url := embeddedNATS(t, opts).ClientURL()
		check(t, RelayCmd{SinkURL: url, NATSFlags: NATSFlags{NATSCreds: creds}}, RelayCmd{SinkURL: url, NATSFlags: NATSFlags{NATSCreds: foreign}})
	})
	t.Run("MutualTLS", func(t *testing.T) {
		t.Parallel()
		pki := clitest.NewPKI(t)
		url := embeddedNATS(t, server.Options{TLS: true, TLSVerify: true, TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{pki.Server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pki.Pool, MinVersion: tls.VersionTLS12,
		}}).ClientURL()
		tlsURL := strings.Replace(url, "nats://", "tls://", 1)
		check(t, RelayCmd{SinkURL: tlsURL, NATSFlags: NATSFlags{NATSTLSCA: pki.CAFile, NATSTLSCert: pki.ClientCertFile, NATSTLSKey: pki.ClientKeyFile}},
			RelayCmd{SinkURL: tlsURL, NATSFlags: NATSFlags{NATSTLSCA: pki.CAFile}}) // no client certificate
		// The CA alone implies TLS on a nats:// URL; the system's roots do
		// not know the test's CA.
		if err := connect(t, RelayCmd{SinkURL: url, NATSFlags: NATSFlags{NATSTLSCA: pki.CAFile, NATSTLSCert: pki.ClientCertFile, NATSTLSKey: pki.ClientKeyFile}}); err != nil {
			t.Errorf("--nats-tls-ca on a nats:// URL: %v", err)
		}
		if err := connect(t, RelayCmd{SinkURL: tlsURL, NATSFlags: NATSFlags{NATSTLSCert: pki.ClientCertFile, NATSTLSKey: pki.ClientKeyFile}}); err == nil {
			t.Error("the test CA's certificate was verified against the system's roots")
		}
	})
}

// operatorMode returns server options trusting an operator whose account
// has a user, that user's chained credentials file, and the credentials
// of a user of an account the server does not know.
func operatorMode(t *testing.T) (server.Options, string, string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	operator, err := nkeys.CreateOperator()
	must(err)
	opub, err := operator.PublicKey()
	must(err)
	oclaims := jwt.NewOperatorClaims(opub)
	ojwt, err := oclaims.Encode(operator)
	must(err)
	oc, err := jwt.DecodeOperatorClaims(ojwt)
	must(err)
	resolver := &server.MemAccResolver{}
	credsOf := func(signer nkeys.KeyPair, store bool) string {
		account, err := nkeys.CreateAccount()
		must(err)
		apub, err := account.PublicKey()
		must(err)
		ajwt, err := jwt.NewAccountClaims(apub).Encode(signer)
		must(err)
		if store {
			must(resolver.Store(apub, ajwt))
		}
		user, err := nkeys.CreateUser()
		must(err)
		upub, err := user.PublicKey()
		must(err)
		ujwt, err := jwt.NewUserClaims(upub).Encode(account)
		must(err)
		seed, err := user.Seed()
		must(err)
		creds, err := jwt.FormatUserConfig(ujwt, seed)
		must(err)
		return writeFile(t, "user.creds", creds)
	}
	stranger, err := nkeys.CreateOperator()
	must(err)
	return server.Options{TrustedOperators: []*jwt.OperatorClaims{oc}, AccountResolver: resolver},
		credsOf(operator, true), credsOf(stranger, false)
}
