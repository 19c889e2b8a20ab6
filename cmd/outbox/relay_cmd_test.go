package main

// In-process tests of `outbox relay`: flag checks, the Kafka client options
// (TLS, mutual TLS, SASL) against a kfake broker, topic mapping, and an
// outbox that does not exist.

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

	"github.com/alecthomas/kong"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
)

// clearRelayEnv unsets the variables the relay reads, so the test's
// environment cannot fill a flag.
func clearRelayEnv(t *testing.T) {
	for _, v := range []string{"OUTBOX_STORE", "OUTBOX_CONFIG", "OUTBOX_KAFKA_BROKERS", "OUTBOX_KAFKA_USER", "OUTBOX_KAFKA_PASSWORD"} {
		t.Setenv(v, "")
	}
}

func TestRelayUsageErrors(t *testing.T) {
	clearRelayEnv(t)
	store := []string{"relay", "--store", "redis://127.0.0.1:1/0"}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"NoBrokers", nil, []string{"--kafka-brokers is required"}},
		{"BrokerWithoutPort", []string{"--kafka-brokers", "k1:9092,k2"}, []string{`"k2" is not host:port`}},
		{"CertWithoutKey", []string{"--kafka-brokers", "k:9092", "--kafka-tls-cert", "c.pem"}, []string{"--kafka-tls-cert and --kafka-tls-key go together"}},
		{"MechanismWithoutUser", []string{"--kafka-brokers", "k:9092", "--kafka-sasl-mechanism", "SCRAM-SHA-512"}, []string{"--kafka-sasl-mechanism SCRAM-SHA-512 needs --kafka-sasl-user and a password"}},
		{"PasswordWithoutMechanism", []string{"--kafka-brokers", "k:9092", "--kafka-sasl-user", "u", "--kafka-sasl-password", "Hush-Hush-77"}, []string{"no --kafka-sasl-mechanism"}},
		{"UnknownMechanism", []string{"--kafka-brokers", "k:9092", "--kafka-sasl-mechanism", "GSSAPI"}, []string{"--kafka-sasl-mechanism"}},
		{"EmptyMapping", []string{"--kafka-brokers", "k:9092", "--kafka-topic-map", "orders="}, []string{"--kafka-topic-map"}},
		{"ZeroBatch", []string{"--kafka-brokers", "k:9092", "--batch", "0"}, []string{"--batch must be positive"}},
		{"NegativeLease", []string{"--kafka-brokers", "k:9092", "--lease-ttl=-1s"}, []string{"--lease-ttl must be positive"}},
		{"BadLogFormat", []string{"--kafka-brokers", "k:9092", "--log-format", "xml"}, []string{"--log-format"}},
		{"LeaseShorterThanLandingBound", []string{"--kafka-brokers", "k:9092", "--lease-ttl", "10s"}, []string{"--lease-ttl 10s is too short for --kafka-publish-timeout 5s", "raise --lease-ttl above 16s"}},
		{"NegativePublishTimeout", []string{"--kafka-brokers", "k:9092", "--kafka-publish-timeout=-1s"}, []string{"--kafka-publish-timeout must be positive"}},
		{"ZeroUnknownTopicTimeout", []string{"--kafka-brokers", "k:9092", "--kafka-unknown-topic-timeout", "0s"}, []string{"--kafka-unknown-topic-timeout must not be 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cliFails(t, 2, tc.want, append(store, tc.args...)...)
			if strings.Contains(r.stdout+r.stderr, "Hush-Hush-77") {
				t.Errorf("the output shows the password:\n%v", r)
			}
		})
	}
}

// TestRelayTransactionalShortLease: transactional publishing has no
// landing bound, so a short lease passes the flag checks (and the run goes
// on to the store, unreachable here).
func TestRelayTransactionalShortLease(t *testing.T) {
	clearRelayEnv(t)
	r := cliFails(t, 1, []string{"relay: opening the outbox"}, "relay", "--store", "redis://127.0.0.1:1/0",
		"--kafka-brokers", "k:9092", "--lease-ttl", "10s", "--kafka-transactional-id-prefix", "tx-")
	if strings.Contains(r.stderr, "too short") {
		t.Errorf("a transactional relay's lease was judged against a landing bound:\n%v", r)
	}
}

// TestRelayNotMigrated: a relay started before the outbox exists exits 1
// at once, saying how to create it, instead of logging warnings forever.
func TestRelayNotMigrated(t *testing.T) {
	clearRelayEnv(t)
	t.Run("Postgres", func(t *testing.T) {
		u, pool := cliPostgres(t)
		schema := cliSchema(t, pool)
		r := cliFails(t, 1, []string{"outbox migrate up --store URL --schema " + schema + " --partitions N"},
			"relay", "--store", u, "--schema", schema, "--kafka-brokers", "127.0.0.1:1")
		if n := strings.Count(r.stderr, "\n"); n > 3 {
			t.Errorf("%d lines on stderr, want the error alone:\n%v", n, r)
		}
	})
	t.Run("Redis", func(t *testing.T) {
		u, client := cliRedis(t)
		prefix := cliPrefix(t, client)
		r := cliFails(t, 1, []string{"outbox migrate up --store URL --prefix '" + prefix + "' --partitions N"},
			"relay", "--store", u, "--prefix", prefix, "--kafka-brokers", "127.0.0.1:1")
		if n := strings.Count(r.stderr, "\n"); n > 3 {
			t.Errorf("%d lines on stderr, want the error alone:\n%v", n, r)
		}
	})
}

func TestRelayTopicMapping(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cmd    RelayCmd
		topics map[string]string // entry topic -> Kafka topic
	}{
		{"None", RelayCmd{}, map[string]string{"orders": "orders"}},
		{"Prefix", RelayCmd{KafkaTopicPrefix: "prod."}, map[string]string{"orders": "prod.orders"}},
		{"Map", RelayCmd{KafkaTopicMap: map[string]string{"orders": "billing.orders"}}, map[string]string{"orders": "billing.orders", "users": "users"}},
		{"MapAndPrefix", RelayCmd{KafkaTopicPrefix: "prod.", KafkaTopicMap: map[string]string{"orders": "billing.orders"}},
			map[string]string{"orders": "billing.orders", "users": "prod.users"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.cmd.sinkOptions()
			for from, want := range tc.topics {
				got := from // the sink's default: the entry's topic
				if o.Topic != nil {
					got = o.Topic(outbox.Entry{Topic: from})
				}
				if got != want {
					t.Errorf("entry topic %q goes to %q, want %q", from, got, want)
				}
			}
		})
	}
}

// TestRelayKafkaOptions connects with the relay's client options to a
// kfake broker that requires TLS with a client certificate and SASL, with
// each mechanism.
func TestRelayKafkaOptions(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	const user, pass = "relay", "Kafka-Pa55-x9"
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pki.server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pki.pool, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(),
		kfake.Superuser("PLAIN", user, pass),
		kfake.Superuser("SCRAM-SHA-256", user, pass),
		kfake.Superuser("SCRAM-SHA-512", user, pass),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	base := RelayCmd{KafkaClientID: "relay-test", KafkaTLSCA: pki.caFile, KafkaTLSCert: pki.clientCertFile, KafkaTLSKey: pki.clientKeyFile, KafkaSASLUser: user}
	ping := func(c RelayCmd) error {
		opts, err := c.kafkaOptions()
		if err != nil {
			return err
		}
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RequestRetries(0)}, opts...)...)
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return cl.Ping(ctx)
	}
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			c := base
			c.KafkaSASLMechanism, c.KafkaSASLPassword = mech, pass
			if err := ping(c); err != nil {
				t.Errorf("ping: %v", err)
			}
			c.KafkaSASLPassword = "Wrong-Pa55-y8"
			err := ping(c)
			if err == nil {
				t.Fatal("ping with a wrong password succeeded")
			}
			if strings.Contains(err.Error(), "Wrong-Pa55-y8") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
	t.Run("NoClientCertificate", func(t *testing.T) {
		t.Parallel()
		c := base
		c.KafkaTLSCert, c.KafkaTLSKey = "", ""
		c.KafkaSASLMechanism, c.KafkaSASLPassword = "SCRAM-SHA-512", pass
		if err := ping(c); err == nil {
			t.Error("ping without the client certificate the broker requires succeeded")
		}
	})
	t.Run("SystemRoots", func(t *testing.T) {
		t.Parallel()
		c := base
		c.KafkaTLSCA = ""
		c.KafkaSASLMechanism, c.KafkaSASLPassword = "SCRAM-SHA-512", pass
		if err := ping(c); err == nil {
			t.Error("ping verified the test CA's certificate against the system's roots")
		}
	})
	t.Run("BadFiles", func(t *testing.T) {
		t.Parallel()
		notPEM := filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			cmd  RelayCmd
			want string
		}{
			{RelayCmd{KafkaTLSCA: filepath.Join(t.TempDir(), "missing.pem")}, "--kafka-tls-ca"},
			{RelayCmd{KafkaTLSCA: notPEM}, "holds no PEM certificate"},
			{RelayCmd{KafkaTLSCert: notPEM, KafkaTLSKey: notPEM}, "--kafka-tls-cert and --kafka-tls-key"},
		} {
			if _, err := tc.cmd.kafkaOptions(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("kafkaOptions() error = %v, want one naming %q", err, tc.want)
			}
		}
	})
}

// testPKI is a CA, a server certificate for 127.0.0.1 and a client
// certificate, as PEM files and parsed.
type testPKI struct {
	caFile, certFile, keyFile, clientCertFile, clientKeyFile string
	server                                                   tls.Certificate
	pool                                                     *x509.CertPool
}

func newTestPKI(t *testing.T) testPKI {
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
	p := testPKI{caFile: write("ca.pem", "CERTIFICATE", caDER), pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.certFile, p.keyFile, p.server = issue(2, "broker", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	p.clientCertFile, p.clientKeyFile, _ = issue(3, "client", x509.ExtKeyUsageClientAuth, nil)
	return p
}

// TestRelayUnknownTopicTimeout: --kafka-unknown-topic-timeout (or its
// config key) becomes the sink's UnknownTopicTimeout; by default 1m.
func TestRelayUnknownTopicTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		config string
		args   []string
		want   time.Duration
	}{
		{"Default", "", nil, time.Minute},
		{"Flag", "", []string{"--kafka-unknown-topic-timeout", "10m"}, 10 * time.Minute},
		{"Negative", "", []string{"--kafka-unknown-topic-timeout=-1s"}, -time.Second},
		{"ConfigKey", "kafka-unknown-topic-timeout: 90s\n", nil, 90 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var cli CLI
			parser, err := kong.New(&cli, kong.Resolvers(&configResolver{secrets: &secretSet{}}), kong.Bind(&App{}))
			if err != nil {
				t.Fatal(err)
			}
			args := append([]string{"relay", "--kafka-brokers", "k:9092"}, tc.args...)
			if tc.config != "" {
				args = append(args, "--config", writeConfig(t, tc.config))
			}
			if _, err := parser.Parse(args); err != nil {
				t.Fatal(err)
			}
			if got := cli.Relay.sinkOptions().UnknownTopicTimeout; got != tc.want {
				t.Fatalf("UnknownTopicTimeout = %v, want %v", got, tc.want)
			}
		})
	}
}
