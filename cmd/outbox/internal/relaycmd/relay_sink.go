package relaycmd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
)

// The sinks the relay can publish to, by the scheme of --sink-url. Each
// has a file of its own (relay_kafka.go, relay_nats.go, relay_amqp.go)
// with its flags' checks and a build function that makes a relaySink.
const (
	sinkKafka = "kafka"
	sinkNATS  = "nats"
	sinkAMQP  = "amqp"
)

// sinkGroups are the help groups of each sink's flags: a flag of another
// sink's group than the selected one is an error.
var sinkGroups = map[string]string{sinkKafka: "Kafka", sinkNATS: "NATS", sinkAMQP: "RabbitMQ"}

// sinkSchemes maps the schemes --sink-url accepts to the sink.
var sinkSchemes = map[string]string{
	"kafka": sinkKafka,
	"nats":  sinkNATS, "tls": sinkNATS,
	"amqp": sinkAMQP, "amqps": sinkAMQP,
}

// relaySink is the sink the relay publishes to, with what the relay needs
// of it besides Publish: readiness, closing, and how to name it.
type relaySink struct {
	// Sink is the sink itself, with its optional interfaces
	// (outbox.KeyOrderer, outbox.LandingBounder), for the relay.
	Sink outbox.Sink
	// name is the broker as the log lines and /readyz name it: "Kafka",
	// "NATS" or "RabbitMQ".
	name string
	// timeoutFlag is the flag of the publish timeout, and timeout its
	// value: /readyz reports not ready once every publish has failed for
	// twice it, and the lease check names it.
	timeoutFlag string
	timeout     time.Duration
	// landing names what the sink's landing bound comes from, for the
	// lease check's error; default "the landing bound of " timeoutFlag.
	landing string
	// failing is the sink's Failing (since when every publish has failed).
	failing func() (time.Time, error)
	// probe is the readiness check of the broker: a cheap round trip.
	probe func(context.Context) error
	// close closes the sink and whatever the relay opened for it.
	close func() error
	// attrs are the start log line's attributes of the sink, no secret.
	attrs []any
}

// sinkKind is the sink the flags select: by the scheme of --sink-url, or
// Kafka with --kafka-brokers. Giving both, or neither, is an error.
func (c *RelayCmd) sinkKind() (string, error) {
	if c.SinkURL == "" {
		if len(c.KafkaBrokers) == 0 {
			return "", fmt.Errorf("--sink-url or --kafka-brokers is required: the broker to publish to, as --sink-url kafka://HOST:PORT,..., nats://HOST:4222 or amqp://USER@HOST:5672/VHOST (or OUTBOX_SINK_URL), or --kafka-brokers HOST:PORT,... (or OUTBOX_KAFKA_BROKERS), the Kafka seed brokers")
		}
		return sinkKafka, nil
	}
	scheme, _, ok := strings.Cut(c.SinkURL, "://")
	kind, known := sinkSchemes[strings.ToLower(scheme)]
	switch {
	case !ok || !known:
		return "", fmt.Errorf("--sink-url: the URL's scheme must be kafka://, nats://, tls:// (NATS over TLS), amqp:// or amqps:// (it is %q)", cli.RedactText(scheme))
	case len(c.KafkaBrokers) > 0:
		return "", fmt.Errorf("--sink-url and --kafka-brokers (or OUTBOX_KAFKA_BROKERS) both name the broker: give one (--kafka-brokers H:P,... is --sink-url kafka://H:P,...)")
	}
	return kind, nil
}

// sinkProblems checks the sink flags: the sink selected, its own flags,
// and no flag of another sink. It sets c.sink.
func (c *RelayCmd) sinkProblems() []string {
	kind, err := c.sinkKind()
	if err != nil {
		return []string{err.Error()}
	}
	c.sink = kind
	errs := c.foreignSinkFlags(kind)
	switch kind {
	case sinkKafka:
		errs = append(errs, c.kafkaProblems()...)
	case sinkNATS:
		errs = append(errs, c.natsProblems()...)
	case sinkAMQP:
		errs = append(errs, c.amqpProblems()...)
	}
	return errs
}

// foreignSinkFlags names the flags of the sinks other than kind that are
// set (to something else than their default): most likely a config file
// or environment meant for another broker.
func (c *RelayCmd) foreignSinkFlags(kind string) []string {
	var errs []string
	using := "--sink-url " + kindScheme(c.SinkURL, kind)
	if c.SinkURL == "" {
		using = "--kafka-brokers"
	}
	for _, f := range setFlags(reflect.ValueOf(c).Elem()) {
		if g := f.group; g != sinkGroups[kind] && slices.Contains([]string{"Kafka", "NATS", "RabbitMQ"}, g) && f.name != "kafka-brokers" {
			errs = append(errs, fmt.Sprintf("--%s is a %s flag, but %s selects %s: remove it (from the command line, the environment or the --config file)", f.name, g, using, sinkGroups[kind]))
		}
	}
	return errs
}

// kindScheme is the scheme of url ("nats://"), or kind's when url has
// none.
func kindScheme(url, kind string) string {
	if scheme, _, ok := strings.Cut(url, "://"); ok {
		return strings.ToLower(scheme) + "://"
	}
	return kind + "://"
}

// setFlag is a flag whose value is not its default.
type setFlag struct{ name, group string }

// setFlags lists the flags of v (a command struct, embedded structs
// included) whose values differ from their defaults.
func setFlags(v reflect.Value) []setFlag {
	var out []setFlag
	t := v.Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		if f.Anonymous && fv.Kind() == reflect.Struct {
			out = append(out, setFlags(fv)...)
			continue
		}
		name := f.Tag.Get("name")
		if name == "" || !f.IsExported() {
			continue
		}
		if !isDefault(fv, f.Tag.Get("default")) {
			out = append(out, setFlag{name: name, group: f.Tag.Get("group")})
		}
	}
	return out
}

// isDefault reports whether v holds the value of the default tag def (the
// zero value when def is empty).
func isDefault(v reflect.Value, def string) bool {
	if k := v.Kind(); k == reflect.Map || k == reflect.Slice {
		return v.Len() == 0
	}
	if def == "" {
		return v.IsZero()
	}
	switch x := v.Interface().(type) {
	case time.Duration:
		d, err := time.ParseDuration(def)
		return err == nil && x == d
	case int:
		n, err := strconv.Atoi(def)
		return err == nil && x == n
	case string:
		return x == def
	case bool:
		return strconv.FormatBool(x) == def
	}
	return v.IsZero()
}

// buildSink makes the selected sink from the flags. The sink makes no
// connection yet unless the broker's client must (NATS and RabbitMQ
// connect at once; their errors say so).
func (c *RelayCmd) buildSink() (*relaySink, error) {
	switch c.sink {
	case sinkNATS:
		return c.natsSink()
	case sinkAMQP:
		return c.amqpSink()
	}
	return c.kafkaSink()
}

// tlsFromFiles builds a TLS configuration from the files of the flags
// named flag-ca, flag-cert and flag-key ("--kafka-tls-ca" ...): the
// system's roots unless ca, a client certificate when cert is given, TLS
// 1.2 at least; serverName ("" for the host dialled) is the name the
// server's certificate is verified against. Errors name the flags.
func tlsFromFiles(flag, ca, cert, key, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("relay: %s-ca: %w", flag, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("relay: %s-ca %s holds no PEM certificate", flag, ca)
		}
		cfg.RootCAs = pool
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("relay: %s-cert and %s-key: %w", flag, flag, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
