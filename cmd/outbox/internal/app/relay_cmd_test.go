package app

// In-process tests of `outbox relay`: flag checks, the Kafka client options
// (TLS, mutual TLS, SASL) against a kfake broker, topic mapping, and an
// outbox that does not exist.

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/alecthomas/kong"
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
		{"LeaseShorterThanLandingBound", []string{"--kafka-brokers", "k:9092", "--lease-ttl", "10s"}, []string{"--lease-ttl (10s) is too short for the landing bound of --kafka-publish-timeout (10s)", "raise --lease-ttl to 16s or more"}},
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
			var root CLI
			parser, err := kong.New(&root, kong.Resolvers(cli.NewConfigResolver(&cli.SecretSet{})), kong.Bind(&cli.App{}), cli.DefaultVars())
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
			if got := root.Relay.SinkOptions().UnknownTopicTimeout; got != tc.want {
				t.Fatalf("UnknownTopicTimeout = %v, want %v", got, tc.want)
			}
		})
	}
}
