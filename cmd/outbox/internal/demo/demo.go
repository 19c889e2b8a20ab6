package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
	"github.com/outboxrelay/outbox/ui"
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

	// uiStop, when set, also ends the wait after the run (tests).
	uiStop <-chan struct{}
	// finished is set, with --ui, once the run reached its report: the
	// signal that ends the wait after it does not change the outcome.
	finished bool
}

// Help is the demo's description in outbox demo --help.
func (c *DemoCmd) Help() string {
	return `The demo appends entries in transactions, some of which roll back, to an outbox; runs two relays that publish them through the Kafka sink to an in-process Kafka (franz-go's kfake) while broker failures are injected; stops one relay halfway for a third to take its partitions over; consumes the topic back; and checks that every committed entry arrived or was parked as planned, in per-key order, and that nothing rolled back was published.

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
	switch {
	case r.Entries < 1 || r.Keys < 1 || r.Batch < 1:
		return nil, cli.UsageError("demo: --entries, --keys and --batch must be at least 1")
	case r.Partitions < 2:
		return nil, cli.UsageError("demo: --partitions must be at least 2")
	case r.Poison < 0 || r.Poison > r.Entries/2:
		return nil, cli.UsageError("demo: --poison must be between 0 and half of --entries (%d)", r.Entries/2)
	case !(r.FailRate >= 0 && r.FailRate < 0.9):
		return nil, cli.UsageError("demo: --fail-rate must be in [0, 0.9)")
	case !(r.Rollback >= 0 && r.Rollback < 1):
		return nil, cli.UsageError("demo: --rollback must be in [0, 1)")
	case r.Timeout <= 0:
		return nil, cli.UsageError("demo: --timeout must be positive")
	case r.Progress < 0:
		return nil, cli.UsageError("demo: --progress must not be negative (0 prints no progress lines)")
	}
	if r.UI {
		r.UIAddr = cmp.Or(r.UIAddr, "127.0.0.1:0")
		host, port, err := net.SplitHostPort(r.UIAddr)
		switch {
		case err != nil || port == "":
			return nil, cli.UsageError("demo: --ui-addr %q is not HOST:PORT (such as 127.0.0.1:0; port 0 picks a free one)", r.UIAddr)
		case !cli.IsLoopbackHost(host):
			return nil, cli.UsageError("demo: --ui-addr %s is not a loopback address; the demo's dashboard has no authentication: serve it on 127.0.0.1 (or run outbox ui --token on a store of your own)", r.UIAddr)
		}
	}
	if r.Seed == 0 {
		r.Seed = rand.Uint64() | 1
	}
	kind := ""
	if r.Store != "" {
		scheme, _, ok := strings.Cut(r.Store, "://")
		switch {
		case !ok:
			return nil, cli.UsageError("demo: the --store URL has no scheme; write it as postgres://user@host/db or redis://host:6379/0")
		case scheme == "postgres" || scheme == "postgresql":
			kind = "postgres"
		case scheme == "redis" || scheme == "rediss":
			kind = "redis"
		default:
			return nil, cli.UsageError("demo: --store with scheme %q: the demo runs on postgres://, postgresql://, redis:// or rediss:// URLs", scheme)
		}
	}
	switch {
	case r.Backend == "":
		r.Backend = kind
		if kind == "" {
			r.Backend = "memory"
		}
	case r.Backend != "memory" && r.Backend != "postgres" && r.Backend != "redis":
		return nil, cli.UsageError("demo: --backend %q: use memory, postgres or redis", r.Backend)
	case kind != "" && r.Backend != kind:
		return nil, cli.UsageError("demo: --backend %s with a %s --store URL; give a %s URL or --backend %s", r.Backend, kind, r.Backend, kind)
	}
	if r.Store == "" {
		switch r.Backend {
		case "postgres":
			r.Store = cmp.Or(getenv("OUTBOX_POSTGRES_URL"), demoDefaultPostgres)
		case "redis":
			r.Store = cmp.Or(getenv("OUTBOX_REDIS_URL"), demoDefaultRedis)
		}
	}
	return &r, nil
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

// demo runs the demo on the resolved configuration c. Everything it
// started is stopped, and the demo's schema or keys removed, before it
// returns, whatever the outcome.
func demo(ctx context.Context, c *DemoCmd, out io.Writer) (err error) {
	start := time.Now()
	plan := planDemo(c)
	w := newWorld(plan)
	// The run ends early on the first error (an append, or a relay's
	// store error the demo cannot get past) or with ctx.
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(context.Canceled)
	logs := &relayLog{fatal: cancelRun}
	logger := slog.New(logs)

	// An in-process Kafka speaking the real protocol.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, demoTopic))
	if err != nil {
		return fmt.Errorf("demo: starting the in-process Kafka: %w", err)
	}
	defer cluster.Close()
	kafka, err := kafkasink.Dial(cluster.ListenAddrs(), kafkasink.Options{})
	if err != nil {
		return fmt.Errorf("demo: connecting to the in-process Kafka: %w", err)
	}
	defer kafka.Close()

	db, err := openDemoBackend(runCtx, c, logger)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.close(); cerr != nil {
			err = errors.Join(err, cerr)
		} else if db.what != "" {
			fmt.Fprintf(out, "removed    %s\n", db.what)
		}
	}()

	fmt.Fprintf(out, "outbox demo: %s, %d partitions, 2 relays, in-process Kafka (kfake); seed %d\n", db.name, c.Partitions, c.Seed)
	fmt.Fprintf(out, "plan: %s\n", plan.describe(c))
	var dash *demoDashboard
	if c.UI {
		if dash, err = startDemoDashboard(ctx, c, db); err != nil {
			return err
		}
		defer dash.stop()
		fmt.Fprintf(out, "dashboard  %s (actions answer 403 until the run ends)\n", dash.url)
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(demoTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return fmt.Errorf("demo: creating the consumer: %w", err)
	}
	defer consumer.Close()

	sink := &faultySink{next: kafka, w: w}
	relayOpts := func(owner string) outbox.RelayOptions {
		return outbox.RelayOptions{
			Owner: owner, BatchSize: c.Batch, PollInterval: demoPoll,
			LeaseTTL: 3 * time.Second, AcquireInterval: 100 * time.Millisecond,
			Backoff:         backoff.Policy{Base: 20 * time.Millisecond, Max: 500 * time.Millisecond, MaxAttempts: demoMaxAttempts},
			BreakerCooldown: 500 * time.Millisecond, StatsInterval: -1, Logger: logger,
		}
	}
	relays := map[string]*outbox.Relay{}
	order := []string{}
	var appending, consuming sync.WaitGroup
	// Stop in this order: appenders, relays, consumer; the deferred
	// close above then removes the schema or keys.
	defer func() {
		cancelRun(context.Canceled)
		appending.Wait()
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), demoStopTimeout)
		defer cancel()
		var stopping sync.WaitGroup
		for _, r := range relays {
			stopping.Go(func() { _ = r.Stop(stopCtx) })
		}
		stopping.Wait()
		consuming.Wait()
	}()
	startRelay := func(name string) error {
		r, err := outbox.NewRelay(db.store, sink, relayOpts(name))
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		if err := r.Start(runCtx); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		relays[name] = r
		order = append(order, name)
		return nil
	}
	relaysParked := func() (n int64) {
		for _, r := range relays {
			n += r.Stats().Parked
		}
		return n
	}

	consuming.Go(func() { w.consume(runCtx, consumer) })
	for _, name := range []string{"relay-A", "relay-B"} {
		if err := startRelay(name); err != nil {
			return err
		}
	}
	for g := range 4 {
		appending.Go(func() {
			if err := w.appendLoop(runCtx, db.appendTx, g); err != nil {
				cancelRun(fmt.Errorf("demo: appending a transaction: %w", err))
			}
		})
	}

	// Halfway, relay A stops and relay C takes its partitions over.
	handover := ""
	var progress <-chan time.Time
	if c.Progress > 0 {
		tick := time.NewTicker(c.Progress)
		defer tick.Stop()
		progress = tick.C
	}
	check := time.NewTicker(20 * time.Millisecond)
	defer check.Stop()
	for {
		select {
		case <-runCtx.Done():
			return w.abort(runCtx, c, out, db, logs, relaysParked())
		case <-progress:
			fmt.Fprintf(out, "  %s\n", w.progress(relaysParked()))
		case <-check.C:
		}
		if handover == "" && w.arrived.Load() > int64(plan.arrivals()/2) {
			a := relays["relay-A"]
			held := a.Stats().PartitionsHeld
			stopCtx, cancel := context.WithTimeout(runCtx, demoStopTimeout)
			err := a.Stop(stopCtx)
			cancel()
			if err != nil {
				if runCtx.Err() != nil {
					continue // the select above reports why
				}
				return fmt.Errorf("demo: stopping relay-A: %w", err)
			}
			if err := startRelay("relay-C"); err != nil {
				return err
			}
			handover = fmt.Sprintf("relay-A stopped after %d arrivals holding %d partitions; relay-C took them over",
				w.arrived.Load(), held)
			fmt.Fprintf(out, "  %s\n", handover)
		}
		if w.appendedAll() && w.arrived.Load()+relaysParked() >= int64(plan.committed) {
			break
		}
	}
	stopCtx, cancel := context.WithTimeout(runCtx, demoStopTimeout)
	defer cancel()
	for _, name := range order {
		if err := relays[name].Stop(stopCtx); err != nil {
			return fmt.Errorf("demo: stopping %s: %w", name, err)
		}
	}
	cancelRun(context.Canceled) // the consumer has seen what it will see
	consuming.Wait()
	var stats outbox.RelayStats
	for _, r := range relays {
		s := r.Stats()
		stats.Published += s.Published
		stats.Retried += s.Retried
		stats.Parked += s.Parked
	}
	reportCtx, cancelReport := context.WithTimeout(ctx, demoStopTimeout)
	defer cancelReport()
	err = w.report(reportCtx, out, db, stats, handover, time.Since(start))
	if dash != nil {
		c.finished = true
		dash.running.Store(false)
		fmt.Fprintf(out, "dashboard  %s still serves the demo's outbox, now with requeue and cancel; Ctrl-C (SIGINT) or SIGTERM ends the demo\n", dash.url)
		<-c.uiStop
	}
	return err
}

// demoDashboard is the dashboard of outbox demo --ui.
type demoDashboard struct {
	url string
	// running refuses actions while the run goes on: a requeue or a
	// cancel would change the counts it checks.
	running atomic.Bool
	stop    func()
}

// startDemoDashboard serves the dashboard of db's outbox on --ui-addr.
func startDemoDashboard(ctx context.Context, c *DemoCmd, db *demoBackend) (*demoDashboard, error) {
	ln, err := net.Listen("tcp", c.UIAddr)
	if err != nil {
		return nil, fmt.Errorf("demo: --ui-addr %s: %w", c.UIAddr, err)
	}
	d := &demoDashboard{url: "http://" + ln.Addr().String() + "/"}
	d.running.Store(true)
	h := &cli.LazyHandler{Guard: func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && d.running.Load() {
			cli.UIError(w, http.StatusForbidden, "the demo is running, and a requeue or cancel would change the counts it checks: actions work once it has finished")
			return true
		}
		return false
	}}
	storeName := db.name
	if c.Store != "" {
		storeName = cli.RedactText(c.Store) + " (" + db.name + ")"
	}
	// Sampling every second: a demo run lasts seconds.
	stopUI, err := cli.StartUI(context.WithoutCancel(ctx), h, db.store, ui.Options{
		StoreName: storeName, Kind: c.Backend, SampleInterval: time.Second,
		Outbox: strings.TrimSuffix(strings.Replace(db.what, "keys ", "prefix ", 1), "*"),
		Logger: slog.New(slog.DiscardHandler),
		Redact: func(s string) string { return cli.RedactText(s) },
	})
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("demo: the dashboard: %w", err)
	}
	shutdown := cli.Serve(ln, h)
	d.stop = func() {
		shutdown()
		stopUI()
	}
	return d, nil
}

// abort prints where the run stood and returns why it ended.
func (w *world) abort(runCtx context.Context, c *DemoCmd, out io.Writer, db *demoBackend, logs *relayLog, parked int64) error {
	cause := context.Cause(runCtx)
	var in interruption
	switch {
	case errors.As(cause, &in):
		what := ""
		if db.what != "" {
			what = " and removing " + db.what + " (a second signal quits at once and leaves them behind)"
		}
		fmt.Fprintf(out, "\n%v: stopping the relays%s\n", in, what)
		fmt.Fprintf(out, "  %s\n", w.progress(parked))
		return in
	case errors.Is(cause, errDemoTimeout):
		msg := fmt.Sprintf("demo: timed out after %v (raise --timeout): %s", c.Timeout, w.progress(parked))
		if last := logs.lastError(); last != "" {
			msg += "; the relays last reported: " + last
		}
		return errors.New(msg)
	}
	return cause
}

// demoTx is one planned transaction: entries[first:first+n].
type demoTx struct {
	first, n int
	rollback bool
}

// demoEntry is one planned entry.
type demoEntry struct {
	id  string
	key string
	// seq numbers the committed entries of a key in commit order (-1 for
	// entries of rolled-back transactions).
	seq      int
	rollback bool
	// poison entries are refused permanently by the broker: parked.
	poison bool
	// failures counts the injected transient failures before the entry's
	// first successful publish; demoMaxAttempts means it never gets one and
	// is parked.
	failures int
}

// demoPlan is what a run will do, a pure function of the seed and the
// flags (only the entry IDs, UUIDv7, differ from run to run): the
// transactions, their keys, which roll back, which entries are poison, and
// which publish attempts fail (failsOnPurpose). Concurrency decides only
// the interleaving, so every count the demo prints is the plan's.
type demoPlan struct {
	seed     uint64
	failRate float64
	entries  []demoEntry
	txs      []demoTx
	byID     map[string]int

	committed, committedTxs   int // entries and transactions that commit
	rolledBack, rolledBackTxs int // and that roll back
	keys                      int // distinct keys of committed entries
	poison                    int // committed poison entries
	failures                  int // injected transient failures in all
	exhausted                 int // entries parked after demoMaxAttempts failures
}

func planDemo(c *DemoCmd) *demoPlan {
	rng := rand.New(rand.NewPCG(c.Seed, 0x6f7574626f78)) // consumed in one fixed order below
	p := &demoPlan{seed: c.Seed, failRate: c.FailRate, byID: map[string]int{}}
	nextSeq := map[string]int{}
	var committed []int
	for p.committed < c.Entries {
		n := 1 + rng.IntN(8)
		tx := demoTx{first: len(p.entries), rollback: rng.Float64() < c.Rollback}
		if !tx.rollback {
			n = min(n, c.Entries-p.committed)
		}
		tx.n = n
		for range n {
			e := demoEntry{id: outbox.NewID(), key: "order-" + strconv.Itoa(rng.IntN(c.Keys)), seq: -1, rollback: tx.rollback}
			if !tx.rollback {
				e.seq = nextSeq[e.key]
				nextSeq[e.key]++
				committed = append(committed, len(p.entries))
			}
			p.byID[e.id] = len(p.entries)
			p.entries = append(p.entries, e)
		}
		p.txs = append(p.txs, tx)
		if tx.rollback {
			p.rolledBack, p.rolledBackTxs = p.rolledBack+n, p.rolledBackTxs+1
		} else {
			p.committed, p.committedTxs = p.committed+n, p.committedTxs+1
		}
	}
	p.keys = len(nextSeq)
	// Poison: c.Poison distinct committed entries (a partial shuffle).
	for i := range c.Poison {
		j := i + rng.IntN(len(committed)-i)
		committed[i], committed[j] = committed[j], committed[i]
		p.entries[committed[i]].poison = true
	}
	p.poison = c.Poison
	for i := range p.entries {
		e := &p.entries[i]
		if e.rollback || e.poison {
			continue
		}
		for e.failures < demoMaxAttempts && p.failsOnPurpose(i, e.failures) {
			e.failures++
		}
		p.failures += e.failures
		if e.failures == demoMaxAttempts {
			p.exhausted++
		}
	}
	return p
}

// failsOnPurpose reports whether the publish attempt of entry (its index
// in the plan) that follows attempt earlier failures fails: a pure
// function of (seed, entry, attempt), so it does not matter which relay
// tries when, or how often an attempt is repeated.
func (p *demoPlan) failsOnPurpose(entry, attempt int) bool {
	h := splitmix(splitmix(splitmix(p.seed)^uint64(entry)) ^ uint64(attempt))
	return float64(h>>11)/(1<<53) < p.failRate
}

// splitmix is SplitMix64's output function, a bijective mixer.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// parked is the number of entries the plan parks; arrivals the number it
// delivers.
func (p *demoPlan) parked() int   { return p.poison + p.exhausted }
func (p *demoPlan) arrivals() int { return p.committed - p.parked() }

func (p *demoPlan) describe(c *DemoCmd) string {
	s := fmt.Sprintf("%d entries in %d transactions over %d keys, and %d transactions (%d entries) that roll back; "+
		"%d poison entries; %.4g%% of publish attempts fail on purpose: %d failures",
		p.committed, p.committedTxs, p.keys, p.rolledBackTxs, p.rolledBack, p.poison, c.FailRate*100, p.failures)
	if p.exhausted > 0 {
		s += fmt.Sprintf(", so %d entries fail %d times and are parked", p.exhausted, demoMaxAttempts)
	}
	return s
}

// world is what the demo appended and what arrived, checked against the
// plan.
type world struct {
	plan *demoPlan

	mu         sync.Mutex
	nextTx     int
	committed  []bool // by entry index: its transaction committed
	arrivals   []int  // by entry index: how many times it arrived
	lastSeq    map[string]int
	violations []string
	failedAt   map[[2]int]bool // injected failures seen: (entry, attempt)

	appended, rolledBack atomic.Int64 // entries
	appendedTxs, rbTxs   atomic.Int64 // transactions
	arrived              atomic.Int64 // first arrivals
	attempts, injected   atomic.Int64 // publish attempts, failures injected
	unknown              atomic.Int64 // records with an ID not in the plan
}

func newWorld(p *demoPlan) *world {
	return &world{
		plan:      p,
		committed: make([]bool, len(p.entries)),
		arrivals:  make([]int, len(p.entries)),
		lastSeq:   map[string]int{},
		failedAt:  map[[2]int]bool{},
	}
}

func (w *world) appendedAll() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.nextTx == len(w.plan.txs)
}

// appendLoop appends the plan's transactions in plan order until none is
// left. A transaction is committed and recorded under one lock, so per key
// the plan's sequence order is commit order, the order the outbox must
// keep. The pause between transactions spreads the appends over the run.
func (w *world) appendLoop(ctx context.Context, appendTx func(context.Context, []outbox.Entry, bool) error, g int) error {
	pace := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
	for ctx.Err() == nil {
		w.mu.Lock()
		if w.nextTx == len(w.plan.txs) {
			w.mu.Unlock()
			return nil
		}
		tx := w.plan.txs[w.nextTx]
		entries := make([]outbox.Entry, tx.n)
		for i := range entries {
			e := w.plan.entries[tx.first+i]
			entries[i] = outbox.Entry{
				ID:      e.id,
				Topic:   demoTopic,
				Key:     e.key,
				Payload: fmt.Appendf(nil, `{"order":%q,"seq":%d,"writer":%d}`, e.key, e.seq, g),
				Headers: map[string]string{"content-type": "application/json"},
			}
		}
		err := appendTx(ctx, entries, tx.rollback)
		if err == nil {
			w.nextTx++
			if tx.rollback {
				w.rolledBack.Add(int64(tx.n))
				w.rbTxs.Add(1)
			} else {
				for i := range tx.n {
					w.committed[tx.first+i] = true
				}
				w.appended.Add(int64(tx.n))
				w.appendedTxs.Add(1)
			}
		}
		w.mu.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				return nil // the run ended; its cause is reported
			}
			return err
		}
		time.Sleep(time.Duration(pace.IntN(300)) * time.Microsecond)
	}
	return nil
}

func (w *world) consume(ctx context.Context, cl *kgo.Client) {
	for {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fetches.EachRecord(func(rec *kgo.Record) {
			id := kafkasink.EntryID(rec)
			i, ok := w.plan.byID[id]
			w.mu.Lock()
			defer w.mu.Unlock()
			if !ok {
				w.unknown.Add(1)
				w.violations = append(w.violations, fmt.Sprintf("a record with unknown entry ID %q arrived", id))
				return
			}
			w.arrivals[i]++
			if w.arrivals[i] > 1 {
				return // a duplicate: consumers dedupe by the entry ID
			}
			e := w.plan.entries[i]
			switch {
			case e.rollback:
				w.violations = append(w.violations, "entry "+id+" of a rolled-back transaction arrived")
			case !w.committed[i]:
				w.violations = append(w.violations, "entry "+id+" arrived before its transaction committed")
			case e.poison || e.failures == demoMaxAttempts:
				w.violations = append(w.violations, "entry "+id+" arrived although the broker refused every attempt")
			case string(rec.Key) != e.key:
				w.violations = append(w.violations, fmt.Sprintf("entry %s arrived with key %q, want %q", id, rec.Key, e.key))
			default:
				if last, seen := w.lastSeq[e.key]; seen && e.seq < last {
					w.violations = append(w.violations, fmt.Sprintf("key %s: seq %d arrived after seq %d", e.key, e.seq, last))
				}
				w.lastSeq[e.key] = e.seq
				w.arrived.Add(1)
			}
		})
	}
}

// progress is the progress line; parked is the relays' parked count.
func (w *world) progress(parked int64) string {
	p := w.plan
	return fmt.Sprintf("appended %d/%d, arrived %d/%d, parked %d/%d, publish attempts %d (%d failed on purpose)",
		w.appended.Load(), p.committed, w.arrived.Load(), p.arrivals(), parked, p.parked(), w.attempts.Load(), w.injected.Load())
}

// report prints the summary and checks every count against the plan.
func (w *world) report(ctx context.Context, out io.Writer, db *demoBackend, s outbox.RelayStats, handover string, took time.Duration) error {
	p := w.plan
	var parked []outbox.Entry
	for after := ""; ; {
		page, err := db.inspector.Parked(ctx, after, 500)
		if err != nil {
			return fmt.Errorf("demo: listing the parked entries: %w", err)
		}
		parked = append(parked, page...)
		if len(page) < 500 {
			break
		}
		after = page[len(page)-1].ID
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var problems []string
	problem := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	parkedPoison, parkedExhausted, parkedOther := 0, 0, 0
	isParked := map[int]bool{}
	for _, e := range parked {
		i, ok := p.byID[e.ID]
		switch {
		case !ok || p.entries[i].rollback:
			parkedOther++
		case p.entries[i].poison:
			parkedPoison++
		case p.entries[i].failures == demoMaxAttempts:
			parkedExhausted++
		default:
			parkedOther++
		}
		if ok {
			isParked[i] = true
		}
	}
	duplicates, lost := 0, 0
	for i, e := range p.entries {
		switch n := w.arrivals[i]; {
		case n == 0 && !e.rollback && !isParked[i]:
			lost++
		case n > 1:
			duplicates += n - 1
		}
	}
	distinctFailures := len(w.failedAt)

	fmt.Fprintf(out, "\nappended   %d entries in %d transactions over %d keys; %d transactions (%d entries) rolled back\n",
		w.appended.Load(), w.appendedTxs.Load(), p.keys, w.rbTxs.Load(), w.rolledBack.Load())
	fmt.Fprintf(out, "published  %d entries acknowledged by Kafka and marked sent by the relays; %d arrived, plus %d duplicates (consumers dedupe by the outbox-id header)\n",
		s.Published, w.arrived.Load(), duplicates)
	fmt.Fprintf(out, "failed     %d publish attempts failed on purpose (%d distinct by entry and attempt); the relays retried %d with backoff\n",
		w.injected.Load(), distinctFailures, s.Retried)
	parkedLine := fmt.Sprintf("parked     %d entries: %d poison", len(parked), parkedPoison)
	if parkedExhausted > 0 || p.exhausted > 0 {
		parkedLine += fmt.Sprintf(", %d out of attempts", parkedExhausted)
	}
	if parkedOther > 0 {
		parkedLine += fmt.Sprintf(", %d not planned", parkedOther)
	}
	fmt.Fprintln(out, parkedLine)
	if handover != "" {
		fmt.Fprintf(out, "handover   %s\n", handover)
	}
	fmt.Fprintf(out, "order      per-key order checked over %d keys: %d violations\n", len(w.lastSeq), len(w.violations))
	fmt.Fprintf(out, "lost       %d\n", lost)
	fmt.Fprintf(out, "took       %v\n", took.Round(time.Millisecond))

	if lost > 0 {
		problem("%d committed entries neither arrived nor were parked", lost)
	}
	if n := w.appended.Load(); n != int64(p.committed) || w.rolledBack.Load() != int64(p.rolledBack) {
		problem("appended %d and rolled back %d entries; the plan says %d and %d", n, w.rolledBack.Load(), p.committed, p.rolledBack)
	}
	if n := w.arrived.Load(); n != int64(p.arrivals()) {
		problem("%d entries arrived; the plan delivers %d", n, p.arrivals())
	}
	if parkedPoison != p.poison || parkedExhausted != p.exhausted || parkedOther > 0 {
		problem("parked %d poison and %d out-of-attempts entries and %d others; the plan parks %d poison and %d out-of-attempts entries",
			parkedPoison, parkedExhausted, parkedOther, p.poison, p.exhausted)
	}
	if s.Parked != int64(len(parked)) {
		problem("the relays counted %d parked entries, the store holds %d", s.Parked, len(parked))
	}
	if distinctFailures != p.failures {
		problem("%d distinct publish attempts failed on purpose; the plan fails %d", distinctFailures, p.failures)
	}
	for i, v := range w.violations {
		if i == 5 {
			problem("... and %d more", len(w.violations)-5)
			break
		}
		problem("%s", v)
	}
	if len(problems) > 0 {
		fmt.Fprintln(out, "FAILED")
		return errors.New("demo: " + strings.Join(problems, "; "))
	}
	fmt.Fprintln(out, "OK: every committed entry was delivered or parked as planned, in per-key order; nothing rolled back was published")
	return nil
}

// errInjected marks the failures the demo injects.
var errInjected = errors.New("injected")

// faultySink injects broker failures in front of the Kafka sink:
// permanent ones for the poison entries, transient ones where the plan
// says (failsOnPurpose, by entry and attempt).
type faultySink struct {
	next outbox.Sink
	w    *world
}

func (s *faultySink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	p := s.w.plan
	errs := make([]error, len(msgs))
	var pass []outbox.Entry
	var at []int
	for i, m := range msgs {
		s.w.attempts.Add(1)
		idx, ok := p.byID[m.ID]
		switch {
		case ok && p.entries[idx].poison:
			errs[i] = backoff.Permanent(fmt.Errorf("broker: record rejected (%w poison entry)", errInjected))
		case ok && p.failsOnPurpose(idx, m.Attempts):
			s.w.injected.Add(1)
			s.w.mu.Lock()
			s.w.failedAt[[2]int{idx, m.Attempts}] = true
			s.w.mu.Unlock()
			errs[i] = fmt.Errorf("broker: NOT_LEADER_OR_FOLLOWER (%w)", errInjected)
		default:
			pass, at = append(pass, m), append(at, i)
		}
	}
	if len(pass) > 0 {
		for j, err := range s.next.Publish(ctx, pass) {
			errs[at[j]] = err
		}
	}
	return errs
}

// relayLog receives the relays' and backends' warnings and errors (they
// print nothing): it remembers the last one that is not about an injected
// failure, for the timeout message, and ends the run on an error the
// relays would otherwise retry forever (a prepared statement PgBouncer
// lost).
type relayLog struct {
	fatal func(error)

	mu   sync.Mutex
	last string
}

func (h *relayLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *relayLog) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *relayLog) WithGroup(string) slog.Handler                { return h }

func (h *relayLog) Handle(_ context.Context, r slog.Record) error {
	var err error
	r.Attrs(func(a slog.Attr) bool {
		if e, ok := a.Value.Any().(error); ok && a.Key == "err" {
			err = e
		}
		return true
	})
	if err == nil || errors.Is(err, errInjected) || errors.Is(err, context.Canceled) {
		return nil
	}
	if isPreparedStatementError(err) {
		h.fatal(fmt.Errorf("demo: %s: %w", r.Message, err))
	}
	h.mu.Lock()
	h.last = r.Message + ": " + err.Error()
	h.mu.Unlock()
	return nil
}

func (h *relayLog) lastError() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}
