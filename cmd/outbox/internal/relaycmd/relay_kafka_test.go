package relaycmd

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/clitest"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
)

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
			o := tc.cmd.SinkOptions()
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
	pki := clitest.NewPKI(t)
	const user, pass = "relay", "Kafka-Pa55-x9"
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{pki.Server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pki.Pool, MinVersion: tls.VersionTLS12}),
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
	base := RelayCmd{KafkaClientID: "relay-test", KafkaTLSCA: pki.CAFile, KafkaTLSCert: pki.ClientCertFile, KafkaTLSKey: pki.ClientKeyFile, KafkaSASLUser: user}
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
