package relaycmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
	"go.opentelemetry.io/otel/metric"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/ui"
)

// RelayCmd runs relays from one outbox to a broker (Kafka, NATS
// JetStream or RabbitMQ, by --sink-url) until SIGTERM or SIGINT.
//
// Flag names are also the keys of the --config file. The relay options map
// one to one onto outbox.RelayOptions, the Kafka ones onto kafkasink.Dial's
// options and kgo options, the NATS ones (NATSFlags) onto natssink's and
// the RabbitMQ ones (AMQPFlags) onto amqpsink's.
type RelayCmd struct {
	cli.StoreFlags

	// version is the CLI's version (cli.App.Version), which the relay
	// records in its heartbeats; set by Run.
	version string
	// sink is the sink the flags select (sinkKafka, sinkNATS, sinkAMQP);
	// set by validate.
	sink string

	SinkURL              string            `name:"sink-url" env:"OUTBOX_SINK_URL" placeholder:"URL" group:"Broker" help:"The broker to publish to: kafka://HOST:PORT,HOST:PORT (Kafka; the same as --kafka-brokers), nats://[USER:PASSWORD@]HOST:4222 or tls://HOST:4222 (NATS JetStream; several comma-separated), amqp://USER:PASSWORD@HOST:5672/VHOST or amqps://... (RabbitMQ). Prefer the environment variable when it holds a password. Never printed with its password."`
	KafkaBrokers         []string          `name:"kafka-brokers" sep:"," env:"OUTBOX_KAFKA_BROKERS" placeholder:"HOST:PORT" group:"Kafka" help:"Kafka seed brokers, comma-separated: the shorthand of --sink-url kafka://HOST:PORT,... (give one of the two)."`
	KafkaClientID        string            `name:"kafka-client-id" default:"outbox-relay" placeholder:"ID" group:"Kafka" help:"Kafka client ID the brokers see (quotas, logs, ACL audit). Default: ${default}."`
	KafkaTLS             bool              `name:"kafka-tls" group:"Kafka" help:"Connect to the brokers over TLS, verifying them against the system's roots (or --kafka-tls-ca). The other --kafka-tls-* flags imply it."`
	KafkaTLSCA           string            `name:"kafka-tls-ca" placeholder:"FILE" group:"Kafka" help:"PEM file of the CA certificates to verify the brokers with, instead of the system's roots."`
	KafkaTLSCert         string            `name:"kafka-tls-cert" placeholder:"FILE" group:"Kafka" help:"PEM client certificate for mutual TLS (with --kafka-tls-key)."`
	KafkaTLSKey          string            `name:"kafka-tls-key" placeholder:"FILE" group:"Kafka" help:"PEM private key of --kafka-tls-cert."`
	KafkaTLSServerName   string            `name:"kafka-tls-server-name" placeholder:"NAME" group:"Kafka" help:"Name to verify the brokers' certificates against (default: the host of each broker address)."`
	KafkaSASLMechanism   string            `name:"kafka-sasl-mechanism" enum:",PLAIN,SCRAM-SHA-256,SCRAM-SHA-512" default:"" placeholder:"MECHANISM" group:"Kafka" help:"SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default: no SASL). Use it with TLS: PLAIN sends the password as is."`
	KafkaSASLUser        string            `name:"kafka-sasl-user" env:"OUTBOX_KAFKA_USER" placeholder:"USER" group:"Kafka" help:"SASL user name."`
	KafkaSASLPassword    string            `name:"kafka-sasl-password" env:"OUTBOX_KAFKA_PASSWORD" placeholder:"PASSWORD" group:"Kafka" help:"SASL password; prefer the environment variable, as other users of the host can read command lines. Never printed."`
	KafkaTopicPrefix     string            `name:"kafka-topic-prefix" placeholder:"PREFIX" group:"Kafka" help:"Prefix added to an entry's topic to make its Kafka topic (entries the map names excepted)."`
	KafkaTopicMap        map[string]string `name:"kafka-topic-map" mapsep:"," placeholder:"TOPIC=KAFKA_TOPIC,..." group:"Kafka" help:"Kafka topic of the entries of these topics, comma-separated; the prefix is not added to them."`
	KafkaTransactionalID string            `name:"kafka-transactional-id-prefix" placeholder:"PREFIX" group:"Kafka" help:"Publish each batch as one Kafka transaction of a producer with transactional ID PREFIX<partition>, so a relay that takes a partition over fences the previous holder at the broker. For compacted topics and read_committed consumers; see docs/kafka.md."`
	KafkaAutoCreate      bool              `name:"kafka-auto-create-topics" group:"Kafka" help:"Let producing to a missing topic create it, where the brokers allow that too (auto.create.topics.enable). Default: off, so an entry for a missing topic is retried with backoff and parked once the topic has been unknown for --kafka-unknown-topic-timeout, with an error naming the topic. Turn it on for a development broker that creates topics on demand, such as scripts/kfake.sh's."`
	KafkaUnknownTopic    time.Duration     `name:"kafka-unknown-topic-timeout" default:"1m" placeholder:"DURATION" group:"Kafka" help:"How long a topic may stay unknown to the brokers (not created yet, or being created again) before its entries are parked; until then they are retried with backoff and hold back the later entries of their key. Negative: never parked for that (the attempt limit still parks). Default: ${default}."`
	KafkaPublishTimeout  time.Duration     `name:"kafka-publish-timeout" default:"5s" placeholder:"DURATION" group:"Kafka" help:"Bound on one publish round; records not acknowledged by then are retried later. Without transactions the Kafka sink's landing bound is this plus 5s, and --lease-ttl must exceed 1.5 times that bound. /readyz reports not ready once every publish has failed for twice this. Default: ${default}."`
	NATSFlags
	AMQPFlags
	Batch         int           `name:"batch" default:"${batch}" placeholder:"N" group:"Relay" help:"Most entries fetched from a partition at once. Default: ${default}."`
	LeaseTTL      time.Duration `name:"lease-ttl" default:"${lease_ttl}" placeholder:"DURATION" group:"Relay" help:"Partition lease duration; a dead relay's partitions pass to the others after about this long. Default: ${default}."`
	PollInterval  time.Duration `name:"poll-interval" default:"0s" placeholder:"DURATION" group:"Relay" help:"How often an idle partition looks for due entries when no notification wakes it. Default (0): the store's, ${poll_interval} for Postgres and Redis (whose notifications wake relays in other processes), ${mysql_poll_interval} for MySQL (which has none)."`
	MaxInFlight   int           `name:"max-in-flight" default:"${max_in_flight}" placeholder:"N" group:"Relay" help:"Most messages one partition hands to the broker at once. Default: ${default}."`
	MaxPartitions int           `name:"max-partitions" default:"0" placeholder:"N" group:"Relay" help:"Most partitions this relay holds at once (0: no limit; the fleet shares partitions evenly anyway)."`
	Owner         string        `name:"owner" placeholder:"TOKEN" group:"Relay" help:"Lease owner token, unique among the relays of the outbox (default: host name, process ID and random bytes)."`
	StatsInterval time.Duration `name:"stats-interval" default:"${stats_interval}" placeholder:"DURATION" group:"Relay" help:"How often the outbox gauges (pending, due, parked, lag) are sampled: one query per interval on Postgres and MySQL, one script per partition on Redis. Negative: no gauges. Default: ${default}."`
	DrainTimeout  time.Duration `name:"drain-timeout" default:"30s" placeholder:"DURATION" group:"Relay" help:"On SIGTERM or SIGINT, how long to wait for the batches in flight before cancelling them; the process exits at most about 3s after it. A second signal cancels at once. Default: ${default}."`
	RetentionFlags
	MetricsAddr string `name:"metrics-addr" placeholder:"HOST:PORT" group:"Operations" help:"Serve /metrics (Prometheus), /healthz and /readyz on this address, e.g. :9464 (default: no server)."`
	UIAddr      string `name:"ui-addr" placeholder:"HOST:PORT" group:"Dashboard" help:"Serve the dashboard (as outbox ui does) on this address, e.g. 127.0.0.1:8080; the same address as --metrics-addr serves it on that server, next to /metrics, /healthz and /readyz (default: no dashboard). A non-loopback address needs --ui-token or --ui-basic-auth."`
	UIReadOnly  bool   `name:"ui-read-only" group:"Dashboard" help:"The dashboard refuses every action (requeue, cancel)."`
	UIToken     string `name:"ui-token" env:"OUTBOX_UI_TOKEN" placeholder:"TOKEN" group:"Dashboard" help:"Token (at least 16 characters) every dashboard request needs (Authorization: Bearer TOKEN, or ?token=TOKEN once in a browser). /metrics, /healthz and /readyz need none. Never printed."`
	UIBasicAuth string `name:"ui-basic-auth" placeholder:"USER" group:"Dashboard" help:"Require HTTP basic authentication as USER on the dashboard, with the password in the OUTBOX_UI_PASSWORD environment variable."`
	LogFormat   string `name:"log-format" enum:"text,json" default:"text" group:"Operations" placeholder:"FORMAT" help:"Log format on standard error: text or json. Default: ${default}."`
	LogLevel    string `name:"log-level" enum:"debug,info,warn,error" default:"info" group:"Operations" placeholder:"LEVEL" help:"Least severe level logged: debug, info, warn or error. Default: ${default}."`
}

// Bounds of the steps around the relay, which the drain bound adds up.
const (
	// relayOpenTimeout bounds opening the store at start.
	relayOpenTimeout = cli.OpenTimeout
	// relayShutdownGrace bounds what follows Relay.Stop: the metrics
	// server's shutdown and closing the sink's clients and the store.
	relayShutdownGrace = time.Second
)

// Run runs the relay until SIGTERM or SIGINT, then drains.
func (c *RelayCmd) Run(app *cli.App) error {
	c.version = app.Version
	if err := c.validate(); err != nil {
		return err
	}
	log := c.logger(app.Stderr)
	prevDefault := slog.Default()
	slog.SetDefault(log) // the backends' own logs (listener reconnects, warnings)
	defer slog.SetDefault(prevDefault)

	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(signals)
	// A signal while starting cancels the start; one that comes after
	// is the main loop's.
	startCtx, cancelStart := context.WithCancel(context.Background())
	defer cancelStart()
	started, early := make(chan struct{}), make(chan os.Signal, 1)
	go func() {
		select {
		case s := <-signals:
			early <- s
			cancelStart()
		case <-started:
		}
	}()

	sink, err := c.buildSink()
	if err != nil {
		return err
	}
	defer func() { _ = sink.close() }()
	// The library checks the options; its error names the flags.
	if err := c.relayOptions(nil, nil).Validate(sink.Sink); err != nil {
		return c.optionsError(err, sink)
	}
	mp, metrics, err := newPrometheus()
	if err != nil {
		return err
	}
	defer func() { _ = mp.Shutdown(context.Background()) }()

	ready := &relayReadiness{log: log, ttl: 2 * time.Second, timeout: 2 * time.Second, scrub: c.scrubber(app),
		sinkName: sink.name, kafkaCompat: c.sink == sinkKafka, timeoutFlag: sink.timeoutFlag,
		failing: sink.failing, failAfter: 2 * sink.timeout}
	// The HTTP servers stop before the store closes (a request of the
	// dashboard in flight would otherwise meet a closed store): each stop
	// runs once, from a defer after the store's Close, or from this one
	// when the relay ends before the store is open.
	servers := &relayServers{}
	defer servers.stop()
	if err := c.serveHTTP(servers, log, metrics, ready); err != nil {
		return err
	}

	openCtx, cancelOpen := context.WithTimeout(startCtx, relayOpenTimeout)
	opened, err := c.Open(openCtx, cli.OpenOptions{Notify: true, Archive: c.Archive})
	cancelOpen()
	if err != nil {
		if startCtx.Err() != nil {
			log.Info("outbox relay: stopped by a signal while opening the store; nothing to drain")
			return nil
		}
		// Open's errors name the fix (a missing outbox: the migrate
		// command that creates it) and hold no password.
		return fmt.Errorf("relay: opening the outbox: %w", err)
	}
	defer opened.Close()
	defer servers.stop()
	if dashboard := servers.dashboard; dashboard != nil {
		u := c.uiAccess()
		stopUI, err := cli.StartUI(context.Background(), dashboard, opened.Store, u.Options(opened.Where, opened.Kind, opened.Outbox, log, c.scrubber(app)))
		if err != nil {
			return fmt.Errorf("relay: the dashboard: %w", err)
		}
		defer stopUI()
	}

	if c.PollInterval == 0 {
		c.PollInterval = storePollInterval(opened.Store)
	}
	relay, err := outbox.NewRelay(opened.Store, sink.Sink, c.relayOptions(log, mp))
	if err != nil {
		return c.optionsError(err, sink)
	}

	// One check before starting, so an unreachable broker or store is
	// reported at once rather than at the first publish.
	ready.store, ready.sink = relayStoreProbe(opened), sink.probe
	ready.check(startCtx)
	if startCtx.Err() != nil {
		log.Info("outbox relay: stopped by a signal before it started; nothing to drain")
		return nil
	}
	if err := relay.Start(context.Background()); err != nil {
		return fmt.Errorf("relay: %w", err)
	}
	ready.setRelay(relay, opened.Store.Partitions())
	monitorCtx, stopMonitor := context.WithCancel(context.Background())
	defer stopMonitor()
	go ready.monitor(monitorCtx, 10*time.Second)
	go watchHold(monitorCtx, opened.Store, log, 15*time.Second)
	log.Info("outbox relay: running; SIGTERM or SIGINT drains and exits", append([]any{
		"store", opened.Where, "outbox", opened.Outbox, "partitions", opened.Store.Partitions(),
		"owner", relay.Owner(), "sink", c.sink, "poll_interval", c.PollInterval.String()}, append(sink.attrs, "drain_timeout", c.DrainTimeout.String())...)...)
	c.logRetention(log, opened)
	close(started)
	sig := waitSignal(early, signals, app.Stop)
	ready.setStopping()
	stopMonitor()
	return c.drain(relay, sig, signals, log)
}

// waitSignal returns the first signal: one that came while starting, a
// later one, or SIGTERM when stop (nil unless a test set it) is closed.
func waitSignal(early, signals <-chan os.Signal, stop <-chan struct{}) os.Signal {
	select {
	case sig := <-early:
		return sig
	case sig := <-signals:
		return sig
	case <-stop:
		return syscall.SIGTERM
	}
}

// drain stops the relay after sig, within --drain-timeout; a second
// signal cancels the batches in flight at once.
func (c *RelayCmd) drain(relay *outbox.Relay, sig os.Signal, signals <-chan os.Signal, log *slog.Logger) error {
	log.Info("outbox relay: draining: finishing the batches in flight, then releasing the leases", "signal", sig.String(), "drain_timeout", c.DrainTimeout.String())
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), c.DrainTimeout)
	defer cancelDrain()
	go func() {
		select {
		case s := <-signals:
			log.Warn("outbox relay: second signal: cancelling the batches in flight", "signal", s.String())
			cancelDrain()
		case <-drainCtx.Done():
		}
	}()
	began := time.Now()
	stopErr := relay.Stop(drainCtx)
	st := relay.Stats()
	attrs := []any{"took", time.Since(began).Round(time.Millisecond).String(), "published", st.Published, "retried", st.Retried, "parked", st.Parked}
	if stopErr != nil {
		log.Warn("outbox relay: the drain was cut short; in-flight batches were cancelled (their entries are retried by the next holder) and leases not released expire after --lease-ttl", append(attrs, "lease_ttl", c.LeaseTTL.String())...)
		return fmt.Errorf("relay: the drain did not finish within --drain-timeout %v (or a second signal came)", c.DrainTimeout)
	}
	log.Info("outbox relay: drained and released its leases; exiting", attrs...)
	return nil
}

// validate checks flag combinations that kong's tags cannot; its errors
// are usage errors (exit status 2).
func (c *RelayCmd) validate() error {
	errs := c.sinkProblems()
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"--lease-ttl", c.LeaseTTL}, {"--drain-timeout", c.DrainTimeout}} {
		if d.v <= 0 {
			bad("%s must be positive (it is %v)", d.name, d.v)
		}
	}
	if c.PollInterval < 0 {
		bad("--poll-interval must be positive, or 0 for the store's default (it is %v)", c.PollInterval)
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"--batch", c.Batch}, {"--max-in-flight", c.MaxInFlight}} {
		if n.v <= 0 {
			bad("%s must be positive (it is %d)", n.name, n.v)
		}
	}
	if c.MaxPartitions < 0 {
		bad("--max-partitions must be 0 (no limit) or positive (it is %d)", c.MaxPartitions)
	}
	if c.UIAddr != "" {
		errs = append(errs, c.uiAccess().Check()...)
	} else if c.UIReadOnly || c.UIBasicAuth != "" {
		bad("--ui-read-only and --ui-basic-auth configure the dashboard, which only --ui-addr turns on")
	}
	errs = append(errs, c.retentionProblems()...)
	if len(errs) > 0 {
		return cli.UsageError("relay: %s", strings.Join(errs, "; "))
	}
	return nil
}

// kafkaProblems checks the --kafka-* flags, trimming the brokers; it
// returns the problems, for validate.
func (c *RelayCmd) kafkaProblems() []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	list := c.KafkaBrokers
	if c.SinkURL != "" {
		rest := c.SinkURL[len("kafka://"):]
		if strings.ContainsAny(rest, "@/?#") {
			bad("--sink-url: a kafka:// URL is kafka://HOST:PORT,HOST:PORT and nothing else: credentials go in --kafka-sasl-user and OUTBOX_KAFKA_PASSWORD, TLS is --kafka-tls")
			rest = ""
		}
		list = strings.Split(rest, ",")
	}
	brokers := list[:0:0]
	for _, b := range list {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	c.KafkaBrokers = brokers
	flag := "--kafka-brokers"
	if c.SinkURL != "" {
		flag = "--sink-url"
	}
	if len(brokers) == 0 {
		bad("%s names no broker: give the Kafka seed brokers, comma-separated host:port", flag)
	}
	for _, b := range brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			bad("%s: %q is not host:port", flag, b)
		}
	}
	if c.KafkaPublishTimeout <= 0 {
		bad("--kafka-publish-timeout must be positive (it is %v)", c.KafkaPublishTimeout)
	}
	if (c.KafkaTLSCert == "") != (c.KafkaTLSKey == "") {
		bad("--kafka-tls-cert and --kafka-tls-key go together")
	}
	switch {
	case c.KafkaSASLMechanism == "" && (c.KafkaSASLUser != "" || c.KafkaSASLPassword != ""):
		bad("a SASL user or password is set but no --kafka-sasl-mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)")
	case c.KafkaSASLMechanism != "" && (c.KafkaSASLUser == "" || c.KafkaSASLPassword == ""):
		bad("--kafka-sasl-mechanism %s needs --kafka-sasl-user and a password (--kafka-sasl-password or OUTBOX_KAFKA_PASSWORD)", c.KafkaSASLMechanism)
	}
	for from, to := range c.KafkaTopicMap {
		if from == "" || to == "" {
			bad("--kafka-topic-map: %q=%q: write TOPIC=KAFKA_TOPIC with neither side empty", from, to)
		}
	}
	if c.KafkaUnknownTopic == 0 {
		bad("--kafka-unknown-topic-timeout must not be 0: give a duration, or a negative one to never park entries for an unknown topic")
	}
	return errs
}

// uiAccess is the dashboard's settings from the --ui-* flags.
func (c *RelayCmd) uiAccess() *cli.DashboardAccess {
	return &cli.DashboardAccess{
		AddrFlag: "--ui-addr", TokenFlag: "--ui-token", BasicFlag: "--ui-basic-auth",
		Addr: c.UIAddr, ReadOnly: c.UIReadOnly, Token: c.UIToken,
		BasicUser: c.UIBasicAuth, BasicPassword: os.Getenv(cli.UIPasswordEnv),
		SampleInterval: ui.DefaultSampleInterval,
	}
}

// relayServers are the relay's HTTP servers: /metrics, /healthz and
// /readyz on --metrics-addr, and the dashboard on --ui-addr (or next to
// /metrics when the two are the same).
type relayServers struct {
	// dashboard answers 503 until the store is open; nil without
	// --ui-addr.
	dashboard *cli.LazyHandler
	stops     []func()
}

// stop shuts the servers down; each shuts down once however often stop
// is called.
func (s *relayServers) stop() {
	for _, stop := range s.stops {
		stop()
	}
}

// serveHTTP starts the servers the flags ask for.
func (c *RelayCmd) serveHTTP(s *relayServers, log *slog.Logger, metrics http.Handler, ready *relayReadiness) error {
	if c.UIAddr != "" {
		s.dashboard = &cli.LazyHandler{}
		if c.UIAddr != c.MetricsAddr {
			ln, err := net.Listen("tcp", c.UIAddr)
			if err != nil {
				return fmt.Errorf("relay: --ui-addr %s: %w", c.UIAddr, err)
			}
			s.stops = append(s.stops, sync.OnceFunc(cli.Serve(ln, s.dashboard)))
			log.Info("outbox relay: serving the dashboard", "url", "http://"+ln.Addr().String()+"/", "read_only", c.UIReadOnly)
		}
	}
	if c.MetricsAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", c.MetricsAddr)
	if err != nil {
		return fmt.Errorf("relay: --metrics-addr %s: %w", c.MetricsAddr, err)
	}
	var onMetrics http.Handler
	if c.UIAddr == c.MetricsAddr {
		onMetrics = s.dashboard
		log.Info("outbox relay: serving the dashboard next to /metrics", "url", "http://"+ln.Addr().String()+"/", "read_only", c.UIReadOnly)
	}
	srv := relayServer(metrics, ready, onMetrics)
	go func() { _ = srv.Serve(ln) }()
	s.stops = append(s.stops, sync.OnceFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), relayShutdownGrace)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}))
	log.Info("outbox relay: serving /metrics, /healthz and /readyz", "addr", ln.Addr().String())
	return nil
}

// scrubber removes every secret the relay knows of from a text that does
// not pass through the CLI's redacting writers (the /readyz body).
func (c *RelayCmd) scrubber(app *cli.App) func(string) string {
	known := append(cli.URLSecrets(c.Store), cli.URLSecrets(c.SinkURL)...)
	known = append(known, c.KafkaSASLPassword, c.NATSPassword, c.NATSToken, c.AMQPPassword, c.UIToken, os.Getenv(cli.UIPasswordEnv))
	return func(s string) string {
		if app.Secrets != nil {
			s = app.Secrets.Text(s)
		}
		return cli.RedactText(s, known...)
	}
}

// logger returns the slog logger --log-format and --log-level ask for.
func (c *RelayCmd) logger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.LogLevel)) // kong checked the enum
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// relayOptions are the relay's options from the flags.
func (c *RelayCmd) relayOptions(log *slog.Logger, mp metric.MeterProvider) outbox.RelayOptions {
	return outbox.RelayOptions{
		Owner:         c.Owner,
		BatchSize:     c.Batch,
		MaxInFlight:   c.MaxInFlight,
		PollInterval:  c.PollInterval,
		LeaseTTL:      c.LeaseTTL,
		MaxPartitions: c.MaxPartitions,
		StatsInterval: c.StatsInterval,

		ArchiveRetention:  c.ArchiveRetention.Duration(),
		ParkedRetention:   c.ParkedRetention.Duration(),
		RetentionInterval: c.RetentionInterval,
		RetentionBatch:    c.RetentionBatch,
		RetentionPause:    c.RetentionPause,
		HealthInterval:    c.HealthInterval,

		Logger:        log,
		MeterProvider: mp,
		Version:       heartbeatVersion(c.version),
	}
}

// storePollInterval is the poll interval NewRelay takes for the store
// when --poll-interval is 0: the store's [outbox.PollAdvisor] advice (a
// MySQL backend's, shorter than the others' for want of notifications
// between processes), else the library's default.
func storePollInterval(store outbox.Store) time.Duration {
	if p, ok := store.(outbox.PollAdvisor); ok && p.PollInterval() > 0 {
		return p.PollInterval()
	}
	return outbox.DefaultPollInterval
}

// heartbeatVersion is the version the relay records in its heartbeats:
// the CLI's, except for a development build ("(devel)") or none, for
// which the library's default adds the VCS revision the build recorded.
func heartbeatVersion(cliVersion string) string {
	if cliVersion == "(devel)" {
		return ""
	}
	return cliVersion
}

// optionFlags names the flags (or what stands for them) of the relay's
// options, for the library's errors; the landing bound is the sink's
// (see optionsError).
var optionFlags = map[string]string{
	"BatchSize":     "--batch",
	"MaxInFlight":   "--max-in-flight",
	"PollInterval":  "--poll-interval",
	"LeaseTTL":      "--lease-ttl",
	"RenewMargin":   "a third of --lease-ttl",
	"MaxPartitions": "--max-partitions",
	"StatsInterval": "--stats-interval",

	"ArchiveRetention":  "--archive-retention",
	"ParkedRetention":   "--parked-retention",
	"RetentionInterval": "--retention-interval",
	"RetentionBatch":    "--retention-batch",
	"RetentionPause":    "--retention-pause",
	"HealthInterval":    "--health-interval",
}

// optionsError is err of outbox.RelayOptions.Validate or NewRelay as the
// CLI reports it: bad options are a usage error naming the flags, the
// landing bound as that of sink's publish timeout flag.
func (c *RelayCmd) optionsError(err error, sink *relaySink) error {
	var oe *outbox.OptionsError
	if errors.As(err, &oe) {
		name := func(o string) string {
			if o == outbox.OptionLandingBound {
				return cmp.Or(sink.landing, "the landing bound of "+sink.timeoutFlag)
			}
			return optionFlags[o]
		}
		return cli.UsageError("relay: %s", strings.ReplaceAll(oe.Describe(name), "\n", "; "))
	}
	return fmt.Errorf("relay: %w", err)
}
