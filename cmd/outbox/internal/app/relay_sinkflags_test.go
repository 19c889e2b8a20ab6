package app

// The relay's --sink-url and the NATS and RabbitMQ flags: bad URL and flag
// combinations are usage errors naming the flag; the config-file keys and
// environment variables reach the sinks' options; the lease check judges
// every sink's landing bound; no password or token is printed.

import (
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// clearSinkEnv unsets the variables of the sinks' flags.
func clearSinkEnv(t *testing.T) {
	clearRelayEnv(t)
	for _, v := range []string{"OUTBOX_SINK_URL", "OUTBOX_NATS_USER", "OUTBOX_NATS_PASSWORD", "OUTBOX_NATS_TOKEN", "OUTBOX_AMQP_PASSWORD"} {
		t.Setenv(v, "")
	}
}

// TestRelaySinkUsageErrors: each bad combination exits 2 before anything
// is dialled, with an error naming the flag (and the URL scheme in use
// for a flag of another sink), and shows no password or token.
func TestRelaySinkUsageErrors(t *testing.T) {
	clearSinkEnv(t)
	const secret = "Hush-Sink-91"
	store := []string{"relay", "--store", "redis://127.0.0.1:1/0"}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"Neither", nil, []string{"--sink-url or --kafka-brokers is required", "OUTBOX_SINK_URL"}},
		{"Both", []string{"--sink-url", "nats://n:4222", "--kafka-brokers", "k:9092"}, []string{"--sink-url and --kafka-brokers (or OUTBOX_KAFKA_BROKERS) both name the broker"}},
		{"UnknownScheme", []string{"--sink-url", "http://u:" + secret + "@h:80"}, []string{"--sink-url: the URL's scheme must be kafka://, nats://, tls://", `"http"`}},
		{"NoScheme", []string{"--sink-url", "h:4222"}, []string{"--sink-url: the URL's scheme must be"}},
		{"KafkaURLWithCredentials", []string{"--sink-url", "kafka://u:" + secret + "@k:9092"}, []string{"a kafka:// URL is kafka://HOST:PORT,HOST:PORT and nothing else", "--kafka-sasl-user"}},
		{"KafkaURLWithoutPort", []string{"--sink-url", "kafka://k1:9092,k2"}, []string{`--sink-url: "k2" is not host:port`}},
		{"KafkaURLEmpty", []string{"--sink-url", "kafka://"}, []string{"--sink-url names no broker"}},
		{"KafkaFlagWithNATS", []string{"--sink-url", "nats://n:4222", "--kafka-topic-prefix", "p."}, []string{"--kafka-topic-prefix is a Kafka flag, but --sink-url nats:// selects NATS"}},
		{"KafkaDefaultChangedWithAMQP", []string{"--sink-url", "amqp://u@mq/v", "--kafka-publish-timeout", "9s"}, []string{"--kafka-publish-timeout is a Kafka flag, but --sink-url amqp:// selects RabbitMQ"}},
		{"NATSFlagWithKafka", []string{"--kafka-brokers", "k:9092", "--nats-subject-prefix", "p."}, []string{"--nats-subject-prefix is a NATS flag, but --kafka-brokers selects Kafka"}},
		{"AMQPFlagWithNATS", []string{"--sink-url", "tls://n:4222", "--amqp-routing-key", "{key}"}, []string{"--amqp-routing-key is a RabbitMQ flag, but --sink-url tls:// selects NATS"}},
		{"NATSTwoAuths", []string{"--sink-url", "nats://n:4222", "--nats-creds", "r.creds", "--nats-token", secret}, []string{"NATS authentication is given more than one way", "--nats-creds"}},
		{"NATSTokenTwice", []string{"--sink-url", "nats://" + secret + "@n:4222", "--nats-token", secret + "x"}, []string{"NATS authentication is given more than one way", "a token in --sink-url", "--nats-token"}},
		{"NATSPasswordTwice", []string{"--sink-url", "nats://u:" + secret + "@n:4222", "--nats-user", "u", "--nats-password", secret}, []string{"NATS authentication is given more than one way", "a user and password in --sink-url"}},
		{"NATSUserWithoutPassword", []string{"--sink-url", "nats://n:4222", "--nats-user", "relay"}, []string{"--nats-user and --nats-password (or OUTBOX_NATS_PASSWORD) go together"}},
		{"NATSPasswordWithoutUser", []string{"--sink-url", "nats://n:4222", "--nats-password", secret}, []string{"--nats-user and --nats-password (or OUTBOX_NATS_PASSWORD) go together"}},
		{"NATSCertWithoutKey", []string{"--sink-url", "nats://n:4222", "--nats-tls-cert", "c.pem"}, []string{"--nats-tls-cert and --nats-tls-key go together"}},
		{"NATSWildcardSubject", []string{"--sink-url", "nats://n:4222", "--nats-subject-map", "orders=billing.*"}, []string{"--nats-subject-map", "no wildcard"}},
		{"NATSPath", []string{"--sink-url", "nats://u:" + secret + "@n:4222/x"}, []string{"a NATS URL has no path or query"}},
		{"NATSMixedSchemes", []string{"--sink-url", "nats://n1:4222,amqp://n2:5672"}, []string{"a NATS URL list has nats:// or tls:// URLs only"}},
		{"NATSZeroTimeout", []string{"--sink-url", "nats://n:4222", "--nats-publish-timeout", "0s"}, []string{"--nats-publish-timeout must be positive"}},
		{"NATSNegativePending", []string{"--sink-url", "nats://n:4222", "--nats-max-pending=-1"}, []string{"--nats-max-pending must be 0"}},
		{"AMQPTLSWithoutAMQPS", []string{"--sink-url", "amqp://u@mq/v", "--amqp-tls-ca", "ca.pem"}, []string{"the --amqp-tls-* flags configure TLS, which an amqps:// URL asks for"}},
		{"AMQPPasswordTwice", []string{"--sink-url", "amqp://u:" + secret + "@mq/v", "--amqp-password", secret}, []string{"the password is given twice"}},
		{"AMQPPasswordWithoutUser", []string{"--sink-url", "amqp://mq/v", "--amqp-password", secret}, []string{"--amqp-password needs a user in the URL"}},
		{"AMQPBadField", []string{"--sink-url", "amqp://u@mq/v", "--amqp-routing-key", "{topic}.{kye}"}, []string{"--amqp-routing-key", "{kye} is not a field"}},
		{"AMQPNoField", []string{"--sink-url", "amqp://u@mq/v", "--amqp-routing-key", "fixed"}, []string{"--amqp-routing-key \"fixed\" has no field"}},
		{"AMQPBadURL", []string{"--sink-url", "amqp://u:" + secret + "@mq:notaport/v"}, []string{"--sink-url"}},
		{"AMQPCertWithoutKey", []string{"--sink-url", "amqps://u@mq/v", "--amqp-tls-cert", "c.pem"}, []string{"--amqp-tls-cert and --amqp-tls-key go together"}},
		{"AMQPZeroTimeout", []string{"--sink-url", "amqp://u@mq/v", "--amqp-publish-timeout", "0s"}, []string{"--amqp-publish-timeout must be positive"}},
		{"AMQPEmptyMapping", []string{"--sink-url", "amqp://u@mq/v", "--amqp-exchange-map", "orders="}, []string{"--amqp-exchange-map"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // the parent's environment stays set until they end
			r := cliFails(t, 2, tc.want, append(store, tc.args...)...)
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("the output shows the secret:\n%v", r)
			}
		})
	}
}

// TestRelaySinkURLFromEnvironment: OUTBOX_SINK_URL selects the sink as
// --sink-url does; with OUTBOX_KAFKA_BROKERS also set, the error names the
// variable.
func TestRelaySinkURLFromEnvironment(t *testing.T) {
	clearSinkEnv(t)
	t.Setenv("OUTBOX_SINK_URL", "nats://n:4222")
	cliFails(t, 2, []string{"--kafka-topic-map is a Kafka flag, but --sink-url nats:// selects NATS"},
		"relay", "--store", "redis://127.0.0.1:1/0", "--kafka-topic-map", "a=b")
	t.Setenv("OUTBOX_KAFKA_BROKERS", "k:9092")
	cliFails(t, 2, []string{"OUTBOX_KAFKA_BROKERS"}, "relay", "--store", "redis://127.0.0.1:1/0")
}

// TestRelaySinkConfigKeys: the sinks' settings in a --config file (the
// keys are the flag names) and their environment variables reach the
// sinks' options; a flag overrides the file.
func TestRelaySinkConfigKeys(t *testing.T) {
	clearSinkEnv(t)
	parse := func(t *testing.T, config string, args ...string) CLI {
		t.Helper()
		var root CLI
		parser, err := kong.New(&root, kong.Resolvers(cli.NewConfigResolver(&cli.SecretSet{})), kong.Bind(&cli.App{}), cli.DefaultVars())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parser.Parse(append([]string{"relay", "--config", writeConfig(t, config)}, args...)); err != nil {
			t.Fatal(err)
		}
		return root
	}
	t.Run("NATS", func(t *testing.T) {
		root := parse(t, "sink-url: nats://n1:4222,nats://n2:4222\nnats-subject-prefix: billing.\nnats-subject-map:\n  audit: audit.all\n"+
			"nats-publish-timeout: 3s\nnats-max-pending: 100\nnats-creds: /etc/outbox/relay.creds\n", "--nats-max-pending", "200")
		r := root.Relay
		o := r.NATSOptions()
		if r.SinkURL != "nats://n1:4222,nats://n2:4222" || r.NATSCreds != "/etc/outbox/relay.creds" || o.PublishTimeout != 3*time.Second || o.MaxPending != 200 {
			t.Errorf("NATS settings from the file: %+v, options %+v", r.NATSFlags, o)
		}
		for topic, want := range map[string]string{"orders": "billing.orders", "audit": "audit.all"} {
			if got := o.Subject(outbox.Entry{Topic: topic}); got != want {
				t.Errorf("topic %s goes to subject %q, want %q", topic, got, want)
			}
		}
	})
	t.Run("RabbitMQ", func(t *testing.T) {
		root := parse(t, "sink-url: amqps://relay@mq:5671/billing\namqp-exchange-prefix: ex.\namqp-exchange-map: audit=audit-x\n"+
			"amqp-routing-key: '{topic}.{key}'\namqp-publish-timeout: 4s\namqp-channels: 8\namqp-max-pending: 64\namqp-tls-server-name: mq.internal\n")
		r := root.Relay
		o := r.AMQPOptions()
		if r.AMQPTLSServerName != "mq.internal" || o.RoutingKeyTemplate != "{topic}.{key}" || o.PublishTimeout != 4*time.Second || o.Channels != 8 || o.MaxPending != 64 {
			t.Errorf("RabbitMQ settings from the file: %+v, options %+v", r.AMQPFlags, o)
		}
		for topic, want := range map[string]string{"orders": "ex.orders", "audit": "audit-x"} {
			if got := o.Exchange(outbox.Entry{Topic: topic}); got != want {
				t.Errorf("topic %s goes to exchange %q, want %q", topic, got, want)
			}
		}
	})
	t.Run("Environment", func(t *testing.T) {
		t.Setenv("OUTBOX_SINK_URL", "nats://env:4222")
		t.Setenv("OUTBOX_NATS_PASSWORD", "from-env-pw")
		t.Setenv("OUTBOX_AMQP_PASSWORD", "amqp-env-pw")
		root := parse(t, "sink-url: nats://file:4222\nnats-password: from-file-pw\n")
		if r := root.Relay; r.SinkURL != "nats://env:4222" || r.NATSPassword != "from-env-pw" || r.AMQPPassword != "amqp-env-pw" {
			t.Errorf("the environment does not override the file: %q %q %q", r.SinkURL, r.NATSPassword, r.AMQPPassword)
		}
	})
}

// TestRelayLeaseCheckPerSink: --lease-ttl must exceed 1.5 times the
// landing bound of whichever sink runs, and the error names what the bound
// comes from: NATS's is --nats-publish-timeout plus 5s (10s by default),
// RabbitMQ's is the sink's own (from its close timeout and the
// connection's heartbeat; 9s by default). Against the real servers, as
// both sinks connect at once.
func TestRelayLeaseCheckPerSink(t *testing.T) {
	clearSinkEnv(t)
	t.Run("NATS", func(t *testing.T) {
		requireReachable(t, "NATS", "OUTBOX_NATS_URL", testenv.NATSURL(), "4222")
		cliFails(t, 2, []string{"--lease-ttl (10s) is too short for the landing bound of --nats-publish-timeout (10s)", "raise --lease-ttl to 16s or more"},
			"relay", "--store", "redis://127.0.0.1:1/0", "--sink-url", testenv.NATSURL(), "--lease-ttl", "10s")
		// A shorter publish timeout makes a shorter bound: the check
		// passes and the run goes on to the store, unreachable here.
		cliFails(t, 1, []string{"relay: opening the outbox"},
			"relay", "--store", "redis://127.0.0.1:1/0", "--sink-url", testenv.NATSURL(), "--lease-ttl", "10s", "--nats-publish-timeout", "1s")
	})
	t.Run("RabbitMQ", func(t *testing.T) {
		requireReachable(t, "RabbitMQ", "OUTBOX_AMQP_URL", testenv.AMQPURL(), "5672")
		cliFails(t, 2, []string{"--lease-ttl (4s) is too short for the RabbitMQ sink's landing bound (", "raise --lease-ttl to"},
			"relay", "--store", "redis://127.0.0.1:1/0", "--sink-url", testenv.AMQPURL(), "--lease-ttl", "4s")
		cliFails(t, 1, []string{"relay: opening the outbox"},
			"relay", "--store", "redis://127.0.0.1:1/0", "--sink-url", testenv.AMQPURL(), "--lease-ttl", "1m")
	})
}

// requireReachable skips (or fails, with OUTBOX_REQUIRE_SERVICES=1) unless
// something answers at rawURL's host and port.
func requireReachable(t *testing.T, service, variable, rawURL, defaultPort string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err == nil {
		port := u.Port()
		if port == "" {
			port = defaultPort
		}
		var c net.Conn
		if c, err = net.DialTimeout("tcp", net.JoinHostPort(u.Hostname(), port), 5*time.Second); err == nil {
			_ = c.Close()
		}
	}
	if err != nil {
		testenv.Unavailable(t, service, variable, err)
	}
}

// TestRelaySinkSecretsNotPrinted: a password or token in --sink-url, in
// the sinks' password and token flags, in their variables or in the
// config file appears in nothing the relay prints: its --help (which
// shows no variable's value), and the errors of a broker that cannot be
// reached (NATS and RabbitMQ connect at start).
func TestRelaySinkSecretsNotPrinted(t *testing.T) {
	clearSinkEnv(t)
	const pw, token = "Sink-Pa55-w0rd-41", "Sink-T0ken-abc-42"
	dead := "127.0.0.1:1"
	store := []string{"relay", "--store", "redis://127.0.0.1:1/0"}
	cfg := writeConfig(t, "sink-url: amqp://relay:"+pw+"@"+dead+"/v\n")
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		code int
	}{
		{"HelpWithVariables", map[string]string{"OUTBOX_SINK_URL": "nats://u:" + pw + "@" + dead, "OUTBOX_NATS_PASSWORD": pw, "OUTBOX_NATS_TOKEN": token, "OUTBOX_AMQP_PASSWORD": pw}, []string{"--help"}, 0},
		{"NATSPasswordInURL", nil, []string{"--sink-url", "nats://relay:" + pw + "@" + dead}, 1},
		{"NATSTokenInURL", nil, []string{"--sink-url", "nats://" + token + "@" + dead}, 1},
		{"NATSTokenFlag", nil, []string{"--sink-url", "nats://" + dead, "--nats-token", token}, 1},
		{"NATSPasswordVariable", map[string]string{"OUTBOX_NATS_PASSWORD": pw}, []string{"--sink-url", "tls://" + dead, "--nats-user", "relay"}, 1},
		{"AMQPPasswordInURL", nil, []string{"--sink-url", "amqp://relay:" + pw + "@" + dead + "/v"}, 1},
		{"AMQPPasswordVariable", map[string]string{"OUTBOX_AMQP_PASSWORD": pw}, []string{"--sink-url", "amqps://relay@" + dead + "/v"}, 1},
		{"AMQPConfigFile", nil, []string{"--config", cfg}, 1},
		{"SinkURLVariable", map[string]string{"OUTBOX_SINK_URL": "amqp://relay:" + pw + "@" + dead + "/v"}, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := append(append([]string{}, store...), tc.args...)
			r := runCLI(t, args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d:\n%v", r.code, tc.code, r)
			}
			checkNoSecret(t, []string{pw, token}, args, r)
			if tc.code == 1 && !strings.Contains(r.stderr, "relay: ") {
				t.Errorf("no error from the relay:\n%v", r)
			}
		})
	}
}

// TestRelayRabbitMQRefusesCredentials: a relay whose password the
// RabbitMQ refuses exits 1 at start, saying so, without the password.
func TestRelayRabbitMQRefusesCredentials(t *testing.T) {
	clearSinkEnv(t)
	requireReachable(t, "RabbitMQ", "OUTBOX_AMQP_URL", testenv.AMQPURL(), "5672")
	u, err := url.Parse(testenv.AMQPURL())
	if err != nil {
		t.Fatal(err)
	}
	const wrong = "Wrong-Amqp-Pa55-77"
	u.User = url.UserPassword(u.User.Username(), wrong)
	r := cliFails(t, 1, []string{"relay: ", "check --sink-url, --amqp-password"}, "relay", "--store", "redis://127.0.0.1:1/0", "--sink-url", u.String())
	checkNoSecret(t, []string{wrong}, nil, r)
	t.Logf("%s", r.stderr)
}
