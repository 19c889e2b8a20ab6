package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"
)

// DemoCmd is outbox demo. Store's default is resolved when the demo runs
// (from the environment, by backend), so the help never shows a URL. The
// demo reads neither the --config file (its flags are noconfig) nor
// OUTBOX_STORE: a file or variable meant for the relay and the admin
// commands must not point it at a production store.
type DemoCmd struct {
	Entries    int           `default:"5000" noconfig:"" help:"Entries to append in committed transactions (the rolled-back ones come on top)."`
	Keys       int           `default:"50" noconfig:"" help:"Distinct keys (aggregates) the entries are spread over."`
	Partitions int           `default:"4" noconfig:"" help:"Partitions of the demo's outbox (at least 2)."`
	Batch      int           `default:"100" noconfig:"" help:"Relay batch size."`
	FailRate   float64       `default:"0.1" noconfig:"" help:"Share of publish attempts that fail with a transient broker error, in [0, 0.9)."`
	Poison     int           `default:"5" noconfig:"" help:"Committed entries the broker rejects permanently, so they end parked (at most half of --entries)."`
	Rollback   float64       `default:"0.05" noconfig:"" help:"Share of appending transactions that roll back, in [0, 1)."`
	Seed       uint64        `default:"1" noconfig:"" help:"Seed of the keys, transactions, rollbacks, poison entries and injected failures: the same seed and flags give the same counts. 0 picks a seed at random (the header prints it)."`
	Timeout    time.Duration `default:"2m" noconfig:"" help:"Give up (exit 1) after this long."`
	Progress   time.Duration `default:"500ms" noconfig:"" help:"Interval of the progress line; 0 prints none."`
	Backend    string        `placeholder:"NAME" noconfig:"" help:"Outbox backend: memory, postgres or redis; the last two in a fresh schema or key prefix that is removed at the end, also on Ctrl-C. Default: the kind of --store when given, else memory."`
	Store      string        `placeholder:"URL" noconfig:"" help:"PostgreSQL or Redis URL for --backend postgres or redis. Default: $OUTBOX_POSTGRES_URL or $OUTBOX_REDIS_URL by backend, else the local server (port 5432 as user postgres; port 6379)."`
	UI         bool          `name:"ui" noconfig:"" help:"Serve the dashboard of the demo's outbox while it runs (the URL is printed; actions answer 403 until the run ends), and keep serving it after the run, with requeue and cancel, until Ctrl-C (SIGINT) or SIGTERM; the exit status is still the run's."`
	UIAddr     string        `name:"ui-addr" placeholder:"HOST:PORT" noconfig:"" help:"Loopback address of --ui's dashboard; port 0 picks a free one. Default: a free port of the IPv4 loopback address."`
	Sink       string        `default:"kafka" enum:"kafka,nats,amqp" placeholder:"NAME" noconfig:"" help:"Broker the relays publish to: kafka (an in-process Kafka, franz-go's kfake), nats (an embedded NATS server with JetStream, its store in a temporary directory) or amqp (a RabbitMQ that runs already: --sink-url). The first two need nothing installed. Default: ${default}."`
	SinkURL    string        `name:"sink-url" placeholder:"URL" noconfig:"" help:"RabbitMQ URL for --sink amqp; the demo makes an exchange and a queue of its own there and deletes them at the end. Default: $OUTBOX_AMQP_URL, else the local broker (port 5672) as user guest."`

	// origin is where Store came from, set by resolve; sinkOrigin where
	// SinkURL came from.
	origin     storeOrigin
	sinkOrigin string
	// uiStop, when set, also ends the wait after the run (tests).
	uiStop <-chan struct{}
	// finished is set, with --ui, once the run reached its report: the
	// signal that ends the wait after it does not change the outcome.
	finished bool
}

// Help is the demo's description in outbox demo --help.
func (c *DemoCmd) Help() string {
	return `The demo appends entries in transactions, some of which roll back, to an outbox; runs two relays that publish them through the Kafka sink to an in-process Kafka (franz-go's kfake), or with --sink nats through the NATS sink to an embedded NATS server with JetStream (--sink amqp: through the RabbitMQ sink to the RabbitMQ at --sink-url, on an exchange and queue of the run's own), while broker failures are injected; stops one relay halfway for a third to take its partitions over; consumes the topic back; and checks that every committed entry arrived or was parked as planned, in per-key order, and that nothing rolled back was published.

Exit status: 0 when every check passes; 1 when one fails, on an error or on --timeout; 130 on SIGINT (Ctrl-C) and 143 on SIGTERM, after stopping the relays and removing the demo's schema or keys (a second signal quits at once and leaves them).

The demo reads neither the --config file nor OUTBOX_STORE: the store comes from --store or, by backend, OUTBOX_POSTGRES_URL or OUTBOX_REDIS_URL.

Behind PgBouncer in transaction pooling mode, add default_query_exec_mode=simple_protocol to the PostgreSQL URL. LISTEN does not work through such a pooler; the demo's relays poll every 50ms, so it runs without wake-ups.`
}

const (
	demoTopic = "orders"
	// demoMaxAttempts is the relays' attempt limit: an entry that fails
	// this many times is parked.
	demoMaxAttempts = 20
	// demoPoll is the relays' poll interval: it paces retries (a retried
	// entry is fetched again by a poll) and replaces wake-ups where LISTEN
	// does not work (PgBouncer in transaction mode).
	demoPoll = 50 * time.Millisecond
	// demoStopTimeout bounds stopping a relay; demoCleanupTimeout bounds
	// removing the demo's schema or keys (also after a signal).
	demoStopTimeout    = 10 * time.Second
	demoCleanupTimeout = 10 * time.Second
)

// Default stores when neither --store nor the variable is set.
const (
	demoDefaultPostgres = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	demoDefaultRedis    = "redis://127.0.0.1:6379/0"
)

// Run runs the demo until it is done, fails, times out or is interrupted.
func (c *DemoCmd) Run(app *cli.App) error {
	cfg, err := c.resolve(os.Getenv)
	if err != nil {
		return err
	}
	ctx, stop := notifyInterrupt(context.Background())
	defer stop()
	if cfg.UI {
		// The wait after the run ends on a signal (not on --timeout).
		stopUI, interrupted := make(chan struct{}), ctx.Done()
		go func() {
			select {
			case <-interrupted:
			case <-app.Stop: // nil unless a test set it: never ready
			}
			close(stopUI)
		}()
		cfg.uiStop = stopUI
	}
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.Timeout, errDemoTimeout)
	defer cancel()
	err = demo(ctx, cfg, app.Stdout)
	if err == nil {
		return nil
	}
	var in interruption
	if errors.As(context.Cause(ctx), &in) && !cfg.finished {
		var left *leftBehindError
		if errors.As(err, &left) {
			err = fmt.Errorf("demo %v, and %w", in, left)
		} else {
			err = fmt.Errorf("demo %v: it stopped and left nothing behind", in)
		}
		err = &cli.ExitError{Code: in.code(), Err: err}
	}
	return pgBouncerHint(cli.Redact(err, cfg.Store))
}

// resolve checks the flags and fills in the backend and the store; getenv
// reads the environment.
func (c *DemoCmd) resolve(getenv func(string) string) (*DemoCmd, error) {
	r := *c
	if err := r.checkFlags(); err != nil {
		return nil, err
	}
	if r.UI {
		if err := r.resolveUIAddr(); err != nil {
			return nil, err
		}
	}
	if r.Seed == 0 {
		r.Seed = rand.Uint64() | 1
	}
	if err := r.resolveBackend(getenv); err != nil {
		return nil, err
	}
	if err := r.resolveSink(getenv); err != nil {
		return nil, err
	}
	return &r, nil
}

// checkFlags checks the counts, shares and durations.
func (c *DemoCmd) checkFlags() error {
	switch {
	case c.Entries < 1 || c.Keys < 1 || c.Batch < 1:
		return cli.UsageError("demo: --entries, --keys and --batch must be at least 1")
	case c.Partitions < 2:
		return cli.UsageError("demo: --partitions must be at least 2")
	case c.Poison < 0 || c.Poison > c.Entries/2:
		return cli.UsageError("demo: --poison must be between 0 and half of --entries (%d)", c.Entries/2)
	case !(c.FailRate >= 0 && c.FailRate < 0.9):
		return cli.UsageError("demo: --fail-rate must be in [0, 0.9)")
	case !(c.Rollback >= 0 && c.Rollback < 1):
		return cli.UsageError("demo: --rollback must be in [0, 1)")
	case c.Timeout <= 0:
		return cli.UsageError("demo: --timeout must be positive")
	case c.Progress < 0:
		return cli.UsageError("demo: --progress must not be negative (0 prints no progress lines)")
	}
	return nil
}

// resolveUIAddr defaults --ui-addr and refuses an address that is not a
// loopback one: the demo's dashboard has no authentication.
func (c *DemoCmd) resolveUIAddr() error {
	c.UIAddr = cmp.Or(c.UIAddr, "127.0.0.1:0")
	host, port, err := net.SplitHostPort(c.UIAddr)
	switch {
	case err != nil || port == "":
		return cli.UsageError("demo: --ui-addr %q is not HOST:PORT (such as 127.0.0.1:0; port 0 picks a free one)", c.UIAddr)
	case !cli.IsLoopbackHost(host):
		return cli.UsageError("demo: --ui-addr %s is not a loopback address; the demo's dashboard has no authentication: serve it on 127.0.0.1 (or run outbox ui --token on a store of your own)", c.UIAddr)
	}
	return nil
}

// resolveBackend fills in --backend (the kind of --store, else memory)
// and --store (by backend, from the environment, else the local server).
func (c *DemoCmd) resolveBackend(getenv func(string) string) error {
	kind, err := storeKind(c.Store)
	if err != nil {
		return err
	}
	switch {
	case c.Backend == "":
		c.Backend = cmp.Or(kind, "memory")
	case c.Backend != "memory" && c.Backend != "postgres" && c.Backend != "redis":
		return cli.UsageError("demo: --backend %q: use memory, postgres or redis", c.Backend)
	case kind != "" && c.Backend != kind:
		return cli.UsageError("demo: --backend %s with a %s --store URL; give a %s URL or --backend %s", c.Backend, kind, c.Backend, kind)
	}
	c.resolveStore(getenv)
	return nil
}

// resolveSink fills in --sink-url for --sink amqp (from OUTBOX_AMQP_URL,
// else the local broker) and refuses it with another sink.
func (c *DemoCmd) resolveSink(getenv func(string) string) error {
	switch {
	case c.Sink != "amqp" && c.SinkURL != "":
		return cli.UsageError("demo: --sink-url is the RabbitMQ of --sink amqp; --sink %s starts its own broker", c.Sink)
	case c.Sink != "amqp":
	case c.SinkURL != "":
		c.sinkOrigin = "from --sink-url"
	case getenv("OUTBOX_AMQP_URL") != "":
		c.SinkURL, c.sinkOrigin = getenv("OUTBOX_AMQP_URL"), "from OUTBOX_AMQP_URL"
	default:
		c.SinkURL, c.sinkOrigin = demoAMQPDefault, "the default, as neither --sink-url nor OUTBOX_AMQP_URL is set"
	}
	return nil
}

// demoStores are, by backend, the variable the demo reads its store URL
// from and the URL it uses when neither --store nor that variable is set.
var demoStores = map[string]struct{ variable, url string }{
	"postgres": {"OUTBOX_POSTGRES_URL", demoDefaultPostgres},
	"redis":    {"OUTBOX_REDIS_URL", demoDefaultRedis},
}

// resolveStore fills in --store for a backend that needs one (from the
// backend's variable, else the local server) and records where it came
// from.
func (c *DemoCmd) resolveStore(getenv func(string) string) {
	s, ok := demoStores[c.Backend]
	c.origin = storeOrigin{variable: s.variable}
	switch {
	case !ok:
	case c.Store != "":
		c.origin.from = "--store"
	case getenv(s.variable) != "":
		c.Store, c.origin.from = getenv(s.variable), s.variable
	default:
		c.Store = s.url
	}
}

// storeOrigin is where the demo's store URL came from: --store, the
// backend's variable, or the default (the local server). The error for a
// store the demo cannot reach says it, and what to change.
type storeOrigin struct {
	// variable is the backend's variable, OUTBOX_POSTGRES_URL or
	// OUTBOX_REDIS_URL.
	variable string
	// from is "--store", the variable, or "" for the default.
	from string
}

func (o storeOrigin) String() string {
	if o.from == "" {
		return "the default, as neither --store nor " + o.variable + " is set"
	}
	return "from " + o.from
}

// fix says what to change to point the demo at another store.
func (o storeOrigin) fix() string {
	switch o.from {
	case "--store":
		return "correct the --store URL"
	case "":
		return "start the server there, or pass --store URL or set " + o.variable
	}
	return "correct " + o.variable + ", or pass --store URL"
}

// storeKind is the backend a --store URL is for, by its scheme: "postgres",
// "redis", or "" when no URL is given.
func storeKind(store string) (string, error) {
	if store == "" {
		return "", nil
	}
	scheme, _, ok := strings.Cut(store, "://")
	switch {
	case !ok:
		return "", cli.UsageError("demo: the --store URL has no scheme; write it as postgres://user@host/db or redis://host:6379/0")
	case scheme == "postgres" || scheme == "postgresql":
		return "postgres", nil
	case scheme == "redis" || scheme == "rediss":
		return "redis", nil
	}
	return "", cli.UsageError("demo: --store with scheme %q: the demo runs on postgres://, postgresql://, redis:// or rediss:// URLs", scheme)
}

// interruption is the cause of a run cancelled by a signal.
type interruption struct{ sig os.Signal }

func (i interruption) Error() string {
	if s, ok := i.sig.(syscall.Signal); ok && s == syscall.SIGTERM {
		return "interrupted by SIGTERM"
	}
	return "interrupted by SIGINT"
}

// code is the exit status: 128 plus the signal number, as shells report it.
func (i interruption) code() int {
	if s, ok := i.sig.(syscall.Signal); ok && s == syscall.SIGTERM {
		return 143
	}
	return 130
}

var errDemoTimeout = errors.New("--timeout reached")

// notifyInterrupt returns a context cancelled, with an interruption as its
// cause, by the first SIGINT or SIGTERM. After that signal the default
// action is restored, so a second one ends the process at once.
func notifyInterrupt(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			signal.Stop(ch)
			cancel(interruption{sig})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(context.Canceled)
	}
}
