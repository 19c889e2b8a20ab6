package controlrelay

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// Modes of -mode.
const (
	modeLossy     = "lossy"
	modeUnordered = "unordered"
	modeLeak      = "leak"
)

// openTimeout bounds connecting to the store and opening the outbox, as
// `outbox relay` bounds it.
const openTimeout = 30 * time.Second

// kafkaClientID is the client ID `outbox relay` gives its Kafka client by
// default (--kafka-client-id), so the broker sees the same client.
const kafkaClientID = "outbox-relay"

// config is what the flags say.
type config struct {
	store          string
	schema         string
	table          string
	prefix         string
	brokers        []string
	mode           string
	drop           float64
	leaseTTL       time.Duration
	publishTimeout time.Duration
	batch          int
	pollInterval   time.Duration
	gather         time.Duration
	seed           uint64
	leakRate       int64 // leak: bytes per second held for good
}

// Main runs the control relay with the command-line arguments args
// (without the subcommand's name) until ctx ends, then drains the relay as
// outbox.Relay.Run does (at most -lease-ttl), closes the sink and the
// store, and returns nil. It returns an error for bad flags (naming the
// flag), a store it cannot open, or a relay that could not start or did
// not stop cleanly. -h returns flag.ErrHelp after printing the usage to
// stderr.
func Main(ctx context.Context, args []string) error {
	_, err := run(ctx, args, os.Stderr)
	return err
}

// result is what a run did, for the tests.
type result struct {
	// handed counts the messages the relay gave the wrapper; dropped
	// those the lossy wrapper did not hand to Kafka.
	handed, dropped int64
	// multiKeyCalls counts the unordered wrapper's Publish calls that held
	// two or more entries of one key and topic (each of them reordered).
	multiKeyCalls int64
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var (
		c       config
		brokers string
	)
	fs := flag.NewFlagSet("control-relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.store, "store", "", "the store holding the outbox: postgres://... or redis://...")
	fs.StringVar(&c.schema, "schema", "", "PostgreSQL schema of the outbox (default "+pgoutbox.DefaultSchema+")")
	fs.StringVar(&c.table, "table", "", "PostgreSQL table of the outbox (default "+pgoutbox.DefaultTable+")")
	fs.StringVar(&c.prefix, "prefix", "", "Redis key prefix of the outbox (default "+redisoutbox.DefaultPrefix+")")
	fs.StringVar(&brokers, "kafka-brokers", "", "Kafka seed brokers, comma-separated host:port")
	fs.StringVar(&c.mode, "mode", "", "how the relay is broken: unordered (each Publish call shuffled), lossy (-drop of the records dropped, reported published) or leak (an honest relay whose process keeps -leak-rate bytes a second more memory)")
	fs.Float64Var(&c.drop, "drop", 0.001, "lossy: probability that a record is dropped, in [0, 1]")
	fs.DurationVar(&c.leaseTTL, "lease-ttl", 10*time.Second, "partition lease duration (relay --lease-ttl)")
	fs.DurationVar(&c.publishTimeout, "kafka-publish-timeout", time.Second, "bound on one publish round (relay --kafka-publish-timeout)")
	fs.IntVar(&c.batch, "batch", 50, "most entries fetched from a partition at once, and handed to the sink at once (relay --batch and --max-in-flight)")
	fs.DurationVar(&c.pollInterval, "poll-interval", 250*time.Millisecond, "how often an idle partition looks for due entries (relay --poll-interval)")
	fs.DurationVar(&c.gather, "gather", 2*time.Second, "unordered: fetch each partition at most this often (unless its last batch was full), so that a batch gathers several entries of a key; 0: as often as the relay asks")
	fs.Uint64Var(&c.seed, "seed", 0, "seed of the random drops and shuffles; 0 picks one (logged)")
	fs.Int64Var(&c.leakRate, "leak-rate", 256<<10, "leak: bytes per second the relay process allocates, touches and keeps until it exits")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("controlrelay: %w", err)
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("controlrelay: unexpected arguments %q: every setting is a flag", fs.Args())
	}
	for b := range strings.SplitSeq(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			c.brokers = append(c.brokers, b)
		}
	}
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	switch c.mode {
	case modeLossy, modeUnordered, modeLeak:
	case "":
		bad("-mode is required: unordered, lossy or leak")
	default:
		bad("-mode %q is unknown: use unordered, lossy or leak", c.mode)
	}
	if c.leakRate <= 0 {
		bad("-leak-rate must be positive (it is %d)", c.leakRate)
	}
	if c.store == "" {
		bad("-store is required (postgres://... or redis://...)")
	}
	if len(c.brokers) == 0 {
		bad("-kafka-brokers is required: the Kafka seed brokers, comma-separated host:port")
	}
	for _, b := range c.brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			bad("-kafka-brokers: %q is not host:port", b)
		}
	}
	if !(c.drop >= 0 && c.drop <= 1) { // also NaN
		bad("-drop is %v; give a probability in [0, 1]", c.drop)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"-lease-ttl", c.leaseTTL}, {"-kafka-publish-timeout", c.publishTimeout}, {"-poll-interval", c.pollInterval}} {
		if d.v <= 0 {
			bad("%s must be positive (it is %v)", d.name, d.v)
		}
	}
	if c.gather < 0 {
		bad("-gather must be 0 or positive (it is %v)", c.gather)
	}
	if c.batch <= 0 {
		bad("-batch must be positive (it is %d)", c.batch)
	}
	if len(errs) > 0 {
		return c, errors.New("controlrelay: " + strings.Join(errs, "; "))
	}
	return c, nil
}

// run is Main writing its logs to stderr.
func run(ctx context.Context, args []string, stderr io.Writer) (result, error) {
	var res result
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return res, err
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil)).With("mode", cfg.mode)
	if cfg.seed == 0 {
		cfg.seed = rand.Uint64() | 1
	}

	// The Kafka sink as `outbox relay` dials it for these settings:
	// kafkasink.Dial's defaults, the relay's client ID, the publish
	// timeout, the default unknown-topic timeout, no topic mapping, no
	// transactions, no topic auto-creation.
	sink, err := kafkasink.Dial(cfg.brokers, kafkasink.Options{PublishTimeout: cfg.publishTimeout}, kgo.ClientID(kafkaClientID))
	if err != nil {
		return res, fmt.Errorf("controlrelay: %w", err)
	}
	defer func() { _ = sink.Close() }()
	// The library's check of the options, before the store is opened; its
	// error names the flags.
	if err := relayOptions(cfg, log).Validate(sink); err != nil {
		return res, optionsError(err)
	}

	openCtx, cancelOpen := context.WithTimeout(ctx, openTimeout)
	store, closeStore, err := openStore(openCtx, cfg, log)
	cancelOpen()
	if err != nil {
		if ctx.Err() != nil {
			log.Info("controlrelay: stopped while opening the store")
			return res, nil
		}
		return res, err
	}
	defer closeStore()

	// Shuffling reorders a key only in a batch holding several of its
	// entries; the relay, woken by notifications and by its own lease
	// renewals, would fetch about one entry of a key at a time at the
	// harness's rates (see the package doc, "Modes").
	if cfg.mode == modeUnordered && cfg.gather > 0 {
		b, ok := store.(backend)
		if !ok {
			return res, fmt.Errorf("controlrelay: the %T store lacks an optional interface the relay uses; use -gather 0", store)
		}
		store = newGatheringStore(b, cfg.gather)
	}

	rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15))
	var (
		wrapped outbox.Sink
		lossy   *lossySink
		shuffle *shuffleSink
	)
	switch cfg.mode {
	case modeLossy:
		lossy = newLossySink(sink, cfg.drop, rng)
		wrapped = lossy
	case modeUnordered:
		shuffle = newShuffleSink(sink, rng)
		wrapped = shuffle
	case modeLeak:
		wrapped = sink
		lk := &leaker{}
		leakCtx, stopLeak := context.WithCancel(ctx)
		defer stopLeak()
		go lk.run(leakCtx, cfg.leakRate, leakTick)
		defer func() {
			log.Info("controlrelay: leak: memory held at exit", "bytes", lk.held())
		}()
	}

	relay, err := outbox.NewRelay(store, wrapped, relayOptions(cfg, log))
	if err != nil {
		return res, optionsError(err)
	}
	log.Info("controlrelay: running a deliberately broken relay; SIGTERM drains and exits",
		"partitions", store.Partitions(), "owner", relay.Owner(), "kafka_brokers", strings.Join(cfg.brokers, ","),
		"drop", cfg.drop, "gather", cfg.gather.String(), "seed", cfg.seed, "batch", cfg.batch)
	runErr := relay.Run(ctx)
	st := relay.Stats()
	attrs := []any{"published", st.Published, "retried", st.Retried, "parked", st.Parked}
	switch cfg.mode {
	case modeLossy:
		res.handed, res.dropped = lossy.handed.Load(), lossy.dropped.Load()
		log.Info("controlrelay: lossy sink: dropped records reported published", append(attrs, "dropped", res.dropped, "of", res.handed)...)
	case modeUnordered:
		res.handed, res.multiKeyCalls = shuffle.handed.Load(), shuffle.multiKey.Load()
		log.Info("controlrelay: unordered sink: publish calls with several entries of a key, each handed on out of the key's order",
			append(attrs, "calls", shuffle.calls.Load(), "reordered_calls", res.multiKeyCalls, "messages", res.handed)...)
	}
	if runErr != nil {
		return res, fmt.Errorf("controlrelay: the relay did not stop cleanly: %w", runErr)
	}
	return res, nil
}

// openStore opens the outbox -store names, with notifications on (as
// `outbox relay` opens it). close closes the backend and its client.
func openStore(ctx context.Context, cfg config, log *slog.Logger) (store outbox.Store, close func(), err error) {
	u, err := url.Parse(cfg.store)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		return nil, nil, fmt.Errorf("controlrelay: -store is not a URL (%v); use postgres://... or redis://...", err)
	}
	where := u.Redacted()
	switch u.Scheme {
	case "postgres", "postgresql":
		if cfg.prefix != "" {
			return nil, nil, errors.New("controlrelay: -prefix names a Redis outbox, but -store is PostgreSQL: use -schema and -table")
		}
		pc, err := pgxpool.ParseConfig(cfg.store)
		if err != nil {
			return nil, nil, fmt.Errorf("controlrelay: -store %s: %v", where, err)
		}
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return nil, nil, fmt.Errorf("controlrelay: -store %s: %v", where, err)
		}
		if err := pool.Ping(ctx); err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("controlrelay: -store %s: %v", where, err)
		}
		b, err := pgoutbox.New(ctx, pool, pgoutbox.Options{Schema: cfg.schema, Table: cfg.table, Logger: log})
		if err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("controlrelay: opening the outbox in %s: %w", where, err)
		}
		return b, func() { _ = b.Close(); pool.Close() }, nil
	case "redis", "rediss":
		if cfg.schema != "" || cfg.table != "" {
			return nil, nil, errors.New("controlrelay: -schema and -table name a PostgreSQL outbox, but -store is Redis: use -prefix")
		}
		opt, err := redis.ParseURL(cfg.store)
		if err != nil {
			return nil, nil, fmt.Errorf("controlrelay: -store %s: %v", where, err)
		}
		client := redis.NewClient(opt)
		if err := client.Ping(ctx).Err(); err != nil {
			_ = client.Close()
			return nil, nil, fmt.Errorf("controlrelay: -store %s: %v", where, err)
		}
		b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: cfg.prefix, Logger: log})
		if err != nil {
			_ = client.Close()
			return nil, nil, fmt.Errorf("controlrelay: opening the outbox in %s: %w", where, err)
		}
		return b, func() { _ = b.Close(); _ = client.Close() }, nil
	case "":
		return nil, nil, fmt.Errorf("controlrelay: -store %s has no scheme; use postgres://... or redis://...", where)
	default:
		return nil, nil, fmt.Errorf("controlrelay: -store: unknown scheme %q; use postgres://... or redis://...", u.Scheme)
	}
}

// relayOptions are the relay's options for cfg.
func relayOptions(cfg config, log *slog.Logger) outbox.RelayOptions {
	return outbox.RelayOptions{
		BatchSize:     cfg.batch,
		MaxInFlight:   cfg.batch,
		PollInterval:  cfg.pollInterval,
		LeaseTTL:      cfg.leaseTTL,
		StatsInterval: -1, // no gauges: nobody collects metrics here
		Logger:        log,
	}
}

// optionsError is err of Validate or NewRelay, naming the flags.
func optionsError(err error) error {
	flags := map[string]string{
		"BatchSize": "-batch", "MaxInFlight": "-batch", "PollInterval": "-poll-interval", "LeaseTTL": "-lease-ttl",
		"RenewMargin": "a third of -lease-ttl", outbox.OptionLandingBound: "the landing bound of -kafka-publish-timeout",
	}
	var oe *outbox.OptionsError
	if errors.As(err, &oe) {
		return fmt.Errorf("controlrelay: %s", strings.ReplaceAll(oe.Describe(func(o string) string { return flags[o] }), "\n", "; "))
	}
	return fmt.Errorf("controlrelay: %w", err)
}
