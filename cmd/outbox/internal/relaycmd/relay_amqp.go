package relaycmd

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
)

// AMQPFlags are the relay's flags for RabbitMQ (--sink-url amqp:// or
// amqps://), mapped onto amqpsink.Options and amqp091-go's config.
type AMQPFlags struct {
	AMQPPassword       string            `name:"amqp-password" env:"OUTBOX_AMQP_PASSWORD" placeholder:"PASSWORD" group:"RabbitMQ" help:"Password of the URL's user, instead of one in the URL; prefer the environment variable, as other users of the host can read command lines. Never printed."`
	AMQPTLSCA          string            `name:"amqp-tls-ca" placeholder:"FILE" group:"RabbitMQ" help:"PEM file of the CA certificates to verify the broker with, instead of the system's roots (amqps:// only)."`
	AMQPTLSCert        string            `name:"amqp-tls-cert" placeholder:"FILE" group:"RabbitMQ" help:"PEM client certificate for mutual TLS (with --amqp-tls-key; amqps:// only)."`
	AMQPTLSKey         string            `name:"amqp-tls-key" placeholder:"FILE" group:"RabbitMQ" help:"PEM private key of --amqp-tls-cert."`
	AMQPTLSServerName  string            `name:"amqp-tls-server-name" placeholder:"NAME" group:"RabbitMQ" help:"Name to verify the broker's certificate against (default: the URL's host; amqps:// only)."`
	AMQPExchangePrefix string            `name:"amqp-exchange-prefix" placeholder:"PREFIX" group:"RabbitMQ" help:"Prefix added to an entry's topic to make its exchange (entries the map names excepted)."`
	AMQPExchangeMap    map[string]string `name:"amqp-exchange-map" mapsep:"," placeholder:"TOPIC=EXCHANGE,..." group:"RabbitMQ" help:"Exchange of the entries of these topics, comma-separated; the prefix is not added to them."`
	AMQPRoutingKey     string            `name:"amqp-routing-key" placeholder:"TEMPLATE" group:"RabbitMQ" help:"Routing key of each message, where {key} stands for the entry's key, {topic} for its topic and {id} for its ID, such as 'orders.{key}' (default: the entry's key)."`
	AMQPPublishTimeout time.Duration     `name:"amqp-publish-timeout" default:"5s" placeholder:"DURATION" group:"RabbitMQ" help:"Bound on one publish round; messages the broker has not confirmed by then are retried later. The sink's landing bound does not depend on it (its channel close timeout plus twice the connection's heartbeat plus 1s: 9s by default), and --lease-ttl must exceed 1.5 times that bound. /readyz reports not ready once every publish has failed for twice this. Default: ${default}."`
	AMQPChannels       int               `name:"amqp-channels" default:"0" placeholder:"N" group:"RabbitMQ" help:"Channels publishing in parallel, keys spread over them (0: the sink's default)."`
	AMQPMaxPending     int               `name:"amqp-max-pending" default:"0" placeholder:"N" group:"RabbitMQ" help:"Most publishes awaiting the broker's confirmation at once (0: the sink's default)."`
}

// routingKeyField matches a {name} of an --amqp-routing-key template.
var routingKeyField = regexp.MustCompile(`\{[^{}]*\}`)

// amqpProblems checks the RabbitMQ flags and the amqp:// URL.
func (c *RelayCmd) amqpProblems() []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	u, err := url.Parse(c.SinkURL)
	if err != nil {
		return []string{"--sink-url: " + cli.RedactText(err.Error(), cli.URLSecrets(c.SinkURL)...)}
	}
	if _, err := amqp.ParseURI(c.SinkURL); err != nil {
		bad("--sink-url %s: %s: write amqp://USER:PASSWORD@HOST:5672/VHOST", u.Redacted(), cli.RedactText(err.Error(), cli.URLSecrets(c.SinkURL)...))
	}
	if _, inURL := u.User.Password(); inURL && c.AMQPPassword != "" {
		bad("the password is given twice, in --sink-url and --amqp-password (or OUTBOX_AMQP_PASSWORD): give one")
	}
	if c.AMQPPassword != "" && u.User.Username() == "" {
		bad("--amqp-password needs a user in the URL: amqp://USER@HOST:5672/VHOST")
	}
	tlsFlags := c.AMQPTLSCA != "" || c.AMQPTLSCert != "" || c.AMQPTLSKey != "" || c.AMQPTLSServerName != ""
	if tlsFlags && !strings.EqualFold(u.Scheme, "amqps") {
		bad("the --amqp-tls-* flags configure TLS, which an amqps:// URL asks for; this one is %s://", strings.ToLower(u.Scheme))
	}
	if (c.AMQPTLSCert == "") != (c.AMQPTLSKey == "") {
		bad("--amqp-tls-cert and --amqp-tls-key go together")
	}
	for from, to := range c.AMQPExchangeMap {
		if from == "" || to == "" {
			bad("--amqp-exchange-map: %q=%q: write TOPIC=EXCHANGE with neither side empty", from, to)
		}
	}
	for _, f := range routingKeyField.FindAllString(c.AMQPRoutingKey, -1) {
		if f != "{key}" && f != "{topic}" && f != "{id}" {
			bad("--amqp-routing-key %q: %s is not a field: use {key} (the entry's key), {topic} (its topic) and {id} (its ID)", c.AMQPRoutingKey, f)
		}
	}
	if c.AMQPRoutingKey != "" && !routingKeyField.MatchString(c.AMQPRoutingKey) {
		bad("--amqp-routing-key %q has no field: every message would get that one key; use {key}, {topic} or {id}", c.AMQPRoutingKey)
	}
	if c.AMQPPublishTimeout <= 0 {
		bad("--amqp-publish-timeout must be positive (it is %v)", c.AMQPPublishTimeout)
	}
	if c.AMQPChannels < 0 || c.AMQPMaxPending < 0 {
		bad("--amqp-channels and --amqp-max-pending must be 0 (the sink's default) or positive")
	}
	return errs
}

// amqpURL is --sink-url with --amqp-password in it; redacted is it
// without the password, for messages.
func (c *RelayCmd) amqpURL() (full, redacted string) {
	u, err := url.Parse(c.SinkURL)
	if err != nil { // amqpProblems reported it
		return c.SinkURL, ""
	}
	if c.AMQPPassword != "" {
		u.User = url.UserPassword(u.User.Username(), c.AMQPPassword)
	}
	return u.String(), u.Redacted()
}

// amqpTLS is the TLS configuration of an amqps:// URL from the
// --amqp-tls-* flags (see tlsFromFiles).
func (c *RelayCmd) amqpTLS() (*tls.Config, error) {
	return tlsFromFiles("--amqp-tls", c.AMQPTLSCA, c.AMQPTLSCert, c.AMQPTLSKey, c.AMQPTLSServerName)
}

// amqpOptionFlags names the flags of amqpsink's options, for the sink's
// messages; the others keep their Go names.
var amqpOptionFlags = map[string]string{
	"Exchange":           "--amqp-exchange-prefix or --amqp-exchange-map",
	"RoutingKeyTemplate": "--amqp-routing-key",
	"PublishTimeout":     "--amqp-publish-timeout",
	"Channels":           "--amqp-channels",
	"MaxPending":         "--amqp-max-pending",
}

// AMQPOptions maps the exchange, routing key and publishing flags onto
// the RabbitMQ sink's options.
func (c *RelayCmd) AMQPOptions() amqpsink.Options {
	return amqpsink.Options{
		Exchange:           topicMapping(c.AMQPExchangePrefix, c.AMQPExchangeMap),
		RoutingKeyTemplate: c.AMQPRoutingKey,
		PublishTimeout:     c.AMQPPublishTimeout,
		Channels:           c.AMQPChannels,
		MaxPending:         c.AMQPMaxPending,
		OptionName:         func(o string) string { return amqpOptionFlags[o] },
	}
}

// amqpSink connects the RabbitMQ sink (amqpsink.Dial connects at once).
func (c *RelayCmd) amqpSink() (*relaySink, error) {
	full, redacted := c.amqpURL()
	cfg := amqp.Config{Properties: amqp.NewConnectionProperties()}
	cfg.Properties.SetClientConnectionName("outbox-relay")
	tlsOn := strings.HasPrefix(strings.ToLower(full), "amqps://")
	if tlsOn {
		t, err := c.amqpTLS()
		if err != nil {
			return nil, err
		}
		cfg.TLSClientConfig = t
	}
	sink, err := amqpsink.Dial(full, c.AMQPOptions(), cfg)
	if err != nil {
		return nil, fmt.Errorf("relay: %w (check --sink-url, --amqp-password and that the broker runs)", cli.Redact(err, full))
	}
	return &relaySink{
		Sink: sink, name: "RabbitMQ", timeoutFlag: "--amqp-publish-timeout", timeout: c.AMQPPublishTimeout,
		landing: "the RabbitMQ sink's landing bound",
		failing: sink.Failing, probe: sink.Ping, close: sink.Close,
		attrs: []any{"amqp_url", redacted, "amqp_tls", tlsOn},
	}, nil
}
