package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxrelay/outbox/chaos/history"
	"github.com/outboxrelay/outbox/chaos/internal/broker"
	"github.com/outboxrelay/outbox/chaos/internal/proc"
	"github.com/outboxrelay/outbox/chaos/internal/servers"
)

// topic is the entries' topic and what they land on: the Kafka topic, the
// NATS stream (and its subject), the RabbitMQ exchange and checked queue.
const topic = "chaos"

// run is one scenario's run: its store, broker, relays and appenders.
type run struct {
	h   *harness
	sc  *scenario
	id  string // unique: names the schema or prefix and every process
	dir string
	rng *mrand.Rand

	kind      string   // "postgres", "redis" or "mysql"
	storeURL  string   // without application_name
	storeArgs []string // --schema / --prefix
	cleanup   []func()

	broker *broker.Broker // the kfake broker, in Kafka scenarios
	target target         // where the relays publish
	server server         // the private NATS or RabbitMQ server, else nil
	faults *history.Writer
	log    *os.File

	mu       sync.Mutex
	relays   []*relayProc // by slot; nil: slot empty
	apps     []*proc.Proc
	nFaults  int
	events   []string // timeline lines for the report (fleet)
	observed []string // what the harness saw of the broker, for the report

	// Private servers, when the scenario runs on one.
	pg      *servers.Postgres
	rds     *servers.Redis
	cluster *servers.RedisCluster
	my      *servers.MariaDB

	// The store URLs of the relays and the appenders in MySQL scenarios
	// (see mysqlSessionURL).
	myRelayURL, myAppURL string

	// inbox is an inbox/ scenario's consumers (nil in the others).
	inbox *inboxRun
}

type relayProc struct {
	slot, gen int
	owner     string
	p         *proc.Proc
	ending    atomic.Bool // the harness killed or terminated it
}

// kill SIGKILLs the relay and waits until it is reaped.
func (rp *relayProc) kill() error {
	rp.ending.Store(true)
	return rp.p.Kill()
}

// terminate sends SIGTERM and waits for the relay to exit.
func (rp *relayProc) terminate(grace time.Duration) error {
	rp.ending.Store(true)
	return rp.p.Terminate(grace)
}

// runScenario runs sc from setup to check and never panics out.
func (h *harness) runScenario(ctx context.Context, sc *scenario) (res *result) {
	res = &result{sc: sc, started: time.Now()}
	r := &run{h: h, sc: sc, id: sc.slug() + "-" + randHex(3), rng: mrand.New(mrand.NewPCG(uint64(time.Now().UnixNano()), 0))}
	r.dir = filepath.Join(h.work, r.id)
	defer func() {
		for i := len(r.cleanup) - 1; i >= 0; i-- {
			r.cleanup[i]()
		}
		res.elapsed = time.Since(res.started)
		res.dir = r.dir
		if r.log != nil {
			_ = r.log.Close()
		}
	}()
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		res.err = err
		return res
	}
	var err error
	if r.log, err = os.Create(filepath.Join(r.dir, "harness.log")); err != nil {
		res.err = err
		return res
	}
	rep, err := r.execute(ctx)
	res.report, res.err = rep, err
	res.relayLog = relayLogSummary(r.dir)
	res.appenders = appenderSummaries(r.dir)
	var missing *missingError
	if errors.As(err, &missing) && os.Getenv("OUTBOX_REQUIRE_SERVICES") != "1" {
		res.report, res.err, res.skipped = nil, nil, missing.Error()
	}
	if r.inbox != nil {
		r.inbox.mu.Lock()
		res.effects, res.consumerKills = r.inbox.effects, r.inbox.kills
		r.inbox.mu.Unlock()
	}
	r.mu.Lock()
	res.events = r.events
	res.observed = r.observed
	r.mu.Unlock()
	if err != nil {
		r.logf("FAILED: %v", err)
	} else {
		r.logf("%v", rep)
	}
	return res
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.log, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// observe records what the harness saw of the broker (kept for the
// report).
func (r *run) observe(format string, args ...any) {
	r.keep(&r.observed, "observed", fmt.Sprintf(format, args...))
}

// event records a line of the scenario's timeline (kept for the report).
func (r *run) event(format string, args ...any) {
	r.keep(&r.events, "event", fmt.Sprintf(format, args...))
}

// keep appends line to lines (under r.mu) and logs it.
func (r *run) keep(lines *[]string, kind, line string) {
	r.mu.Lock()
	*lines = append(*lines, line)
	r.mu.Unlock()
	r.logf("%s: %s", kind, line)
}

func (r *run) execute(ctx context.Context) (*history.Report, error) {
	cfg := r.h.cfg
	if err := r.setupStore(ctx); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	var err error
	r.faults, err = history.Create(filepath.Join(r.dir, "faults.jsonl"))
	if err != nil {
		return nil, err
	}
	if err := r.startTarget(ctx, r.brokerDir()); err != nil {
		return nil, err
	}

	relays := r.sc.relays
	if relays == 0 {
		relays = 2
	}
	r.relays = make([]*relayProc, relays, max(relays, r.sc.maxRelays))
	for i := range relays {
		if err := r.startRelay(i); err != nil {
			return nil, err
		}
	}
	r.cleanup = append(r.cleanup, r.stopRelays)
	for i := range cfg.appenders {
		if err := r.startAppender(i); err != nil {
			return nil, err
		}
	}
	r.cleanup = append(r.cleanup, r.stopAppenders)
	if r.sc.inbox != nil {
		if err := r.setupInbox(ctx); err != nil {
			return nil, fmt.Errorf("consumers: %w", err)
		}
	}

	if r.sc.watch != nil {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); r.sc.watch(wctx, r) }()
		r.cleanup = append(r.cleanup, func() { cancel(); <-done })
	}

	// Faults, after a warm-up that gets every partition delivering.
	if err := sleep(ctx, cfg.warmup); err != nil {
		return nil, err
	}
	phase := r.sc.phase(cfg)
	end := time.Now().Add(phase)
	for i := 0; time.Now().Before(end); i++ {
		if err := r.checkAlive(); err != nil {
			return nil, err
		}
		// A fault that cannot be applied in a minute (a failover that
		// never completes, a server that does not come back) ends the
		// run with an error instead of hanging it.
		fctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := r.sc.inject(fctx, r, i)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("fault %d: %w", i+1, err)
		}
		wait := r.sc.every
		if j := r.sc.jitter; j > 0 {
			wait += time.Duration(r.rng.Int64N(int64(j)))
		}
		if err := sleep(ctx, min(wait, time.Until(end)+time.Millisecond)); err != nil {
			return nil, err
		}
	}
	if r.sc.heal != nil {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := r.sc.heal(hctx, r)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("healing: %w", err)
		}
	}
	// Let the last fault's recovery show in the history before the
	// appenders stop: at least a lease and a bit.
	if err := sleep(ctx, min(phase/4, r.sc.lease(cfg)+2*time.Second)); err != nil {
		return nil, err
	}
	r.stopAppenders()
	if err := r.checkAlive(); err != nil {
		return nil, err
	}
	if err := r.waitDrained(ctx, 2*r.sc.lease(cfg)+60*time.Second); err != nil {
		return nil, err
	}
	r.stopRelays()
	if err := r.faults.Close(); err != nil {
		return nil, err
	}
	rep, err := r.check(ctx)
	return r.finishInbox(ctx, rep, err)
}

// check reads what the broker holds and checks it against the histories.
func (r *run) check(ctx context.Context) (*history.Report, error) {
	ds, err := r.target.consume(ctx)
	if err != nil {
		return nil, fmt.Errorf("consuming %s: %w", topic, err)
	}
	dpath := filepath.Join(r.dir, "deliveries.jsonl")
	w, err := history.Create(dpath)
	if err != nil {
		return nil, err
	}
	for _, d := range ds {
		if err := w.Delivered(d); err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	files := []string{filepath.Join(r.dir, "faults.jsonl"), dpath}
	for i := range r.h.cfg.appenders {
		files = append(files, r.appHistory(i))
	}
	h, err := history.ReadFiles(files...)
	if err != nil {
		return nil, err
	}
	rep := h.Check()
	return &rep, nil
}

// setupStore creates the scenario's outbox: in the shared PostgreSQL or
// Redis under its own schema or prefix, or in a private server.
func (r *run) setupStore(ctx context.Context) error {
	sdir := filepath.Join(r.dir, "server")
	switch r.sc.backend {
	case backendPostgres:
		if err := pingPostgres(ctx, r.h.pgURL); err != nil {
			return &missingError{fmt.Sprintf("no PostgreSQL at OUTBOX_POSTGRES_URL (%v); start one (./scripts/services.sh start) or set the variable", err)}
		}
		r.kind, r.storeURL = "postgres", r.h.pgURL
		schema := "chaos_" + strings.ReplaceAll(r.id, "-", "_")
		r.storeArgs = []string{"--schema", schema}
		r.cleanup = append(r.cleanup, func() { dropSchema(r.h.pgURL, schema) })
	case backendRedis:
		if err := pingRedis(ctx, r.h.redisURL); err != nil {
			return &missingError{fmt.Sprintf("no Redis at OUTBOX_REDIS_URL (%v); start one (./scripts/services.sh start) or set the variable", err)}
		}
		r.kind, r.storeURL = "redis", r.h.redisURL
		prefix := "{chaos-" + r.id + "}"
		r.storeArgs = []string{"--prefix", prefix}
		r.cleanup = append(r.cleanup, func() { dropRedisKeys(r.h.redisURL, "chaos-"+r.id) })
	case backendPrivatePostgres:
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			return err
		}
		pg, err := servers.StartPostgres(ctx, sdir)
		if err != nil {
			return notInstalled(err)
		}
		r.pg = pg
		r.cleanup = append(r.cleanup, func() { _ = pg.Close() })
		r.kind, r.storeURL = "postgres", pg.URL()
	case backendPrivateRedis:
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			return err
		}
		rds, err := servers.StartRedis(ctx, sdir, servers.RedisOptions{AOF: true})
		if err != nil {
			return notInstalled(err)
		}
		r.rds = rds
		r.cleanup = append(r.cleanup, func() { _ = rds.Close() })
		r.kind, r.storeURL = "redis", rds.URL()
	case backendPrivateCluster:
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			return err
		}
		c, err := servers.StartRedisCluster(ctx, sdir, 3, 1)
		if err != nil {
			return notInstalled(err)
		}
		r.cluster = c
		r.cleanup = append(r.cleanup, func() { _ = c.Close() })
		r.kind, r.storeURL = "redis", "redis+cluster://"+strings.Join(c.Addrs(), ",")
	case backendMySQL, backendPrivateMariaDB:
		if err := r.setupMySQL(ctx, sdir); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown backend %q", r.sc.backend)
	}
	args := append([]string{"migrate", "up", "--store", r.storeURL, "--partitions", strconv.Itoa(r.h.cfg.partitions)}, r.storeArgs...)
	if out, err := r.outbox(ctx, args...); err != nil {
		return fmt.Errorf("outbox migrate up: %v\n%s", err, out)
	}
	return nil
}

// outbox runs the CLI and returns its combined output.
func (r *run) outbox(ctx context.Context, args ...string) ([]byte, error) {
	return runOutbox(ctx, r.h.outbox, args...)
}

// appName is the Postgres application_name prefix of this run's sessions:
// the only sessions pg_terminate_backend scenarios touch. (MySQL has no
// application_name: the MySQL scenarios tell sessions apart by user.)
func (r *run) appName() string { return "chaos-" + r.id + "-" }

func (r *run) withAppName(name string) string {
	if r.kind == "mysql" {
		return r.mysqlSessionURL(name)
	}
	if r.kind != "postgres" {
		return r.storeURL
	}
	u, err := url.Parse(r.storeURL)
	if err != nil {
		return r.storeURL
	}
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// startRelay starts `outbox relay` in slot (a new generation of it).
func (r *run) startRelay(slot int) error {
	cfg := r.h.cfg
	r.mu.Lock()
	gen := 0
	if slot < len(r.relays) && r.relays[slot] != nil {
		gen = r.relays[slot].gen + 1
	}
	r.mu.Unlock()
	name := fmt.Sprintf("relay-%d", slot)
	owner := fmt.Sprintf("%s.%d", name, gen)
	args := append([]string{"relay",
		"--store", r.withAppName(r.appName() + name),
		"--lease-ttl", r.sc.lease(cfg).String(),
		"--poll-interval", "250ms",
		"--batch", strconv.Itoa(cfg.batch),
		"--max-in-flight", strconv.Itoa(cfg.batch),
		"--stats-interval=-1s",
		"--drain-timeout", "5s",
		"--owner", owner,
		"--log-format", "json",
	}, r.storeArgs...)
	args = append(args, r.target.relayArgs()...)
	bin := r.h.outbox
	if r.sc.control != "" {
		bin = r.h.self
		args = append([]string{"control-relay",
			"-store", r.withAppName(r.appName() + name),
			"-kafka-brokers", r.broker.Brokers(),
			"-mode", r.sc.control,
			"-lease-ttl", cfg.leaseTTL.String(),
			"-kafka-publish-timeout", cfg.publish.String(),
			"-batch", strconv.Itoa(cfg.batch),
		}, singleDash(r.storeArgs)...)
	}
	p, err := proc.Start(name, filepath.Join(r.dir, name+".log"), bin, args, nil)
	if err != nil {
		return err
	}
	r.mu.Lock()
	for len(r.relays) <= slot {
		r.relays = append(r.relays, nil)
	}
	r.relays[slot] = &relayProc{slot: slot, gen: gen, owner: owner, p: p}
	r.mu.Unlock()
	r.logf("started %s as %s (PID %d)", name, owner, p.PID())
	return nil
}

func (r *run) relay(slot int) *relayProc {
	r.mu.Lock()
	defer r.mu.Unlock()
	if slot < len(r.relays) {
		return r.relays[slot]
	}
	return nil
}

// liveRelays lists the slots whose relay runs.
func (r *run) liveRelays() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []int
	for i, rp := range r.relays {
		if rp == nil {
			continue
		}
		if done, _ := rp.p.Exited(); !done {
			s = append(s, i)
		}
	}
	return s
}

func (r *run) stopRelays() {
	r.mu.Lock()
	rs := append([]*relayProc(nil), r.relays...)
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, rp := range rs {
		if rp == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = rp.p.Cont()
			if err := rp.terminate(15 * time.Second); err != nil {
				r.logf("relay-%d: %v", rp.slot, err)
			}
		}()
	}
	wg.Wait()
}

func (r *run) appHistory(i int) string {
	return filepath.Join(r.dir, fmt.Sprintf("appender-%d.jsonl", i))
}

func (r *run) startAppender(i int) error {
	cfg := r.h.cfg
	name := fmt.Sprintf("app%d", i)
	args := []string{"appender",
		"-store", r.withAppName(r.appName() + name),
		"-name", fmt.Sprintf("%s-%s", r.id, name),
		"-keys", strconv.Itoa(cfg.keys),
		"-topic", topic,
		"-rate", strconv.Itoa(cfg.rate),
		"-workers", "4",
		"-history", r.appHistory(i),
	}
	args = append(args, singleDash(r.storeArgs)...)
	if r.sc.inbox != nil {
		args = append(args, "-key-sequence")
	}
	p, err := proc.Start(name, filepath.Join(r.dir, name+".log"), r.h.self, args, nil)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.apps = append(r.apps, p)
	r.mu.Unlock()
	return nil
}

// singleDash turns the CLI's --schema/--prefix into the flag package's
// -schema/-prefix.
func singleDash(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.TrimPrefix(a, "-")
	}
	return out
}

func (r *run) stopAppenders() {
	r.mu.Lock()
	apps := r.apps
	r.apps = nil
	r.mu.Unlock()
	terminateAll(apps, 20*time.Second, r.logf)
}

// checkAlive fails the run when an appender exited on its own, or a relay
// the scenario did not stop or kill: their logs say why.
func (r *run) checkAlive() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := exitedApp(r.apps); err != nil {
		return err
	}
	for _, rp := range r.relays {
		if rp == nil || rp.ending.Load() {
			continue
		}
		if done, err := rp.p.Exited(); done {
			return fmt.Errorf("relay-%d (%s) exited on its own (%v); see %s", rp.slot, rp.owner, err, rp.p.Log)
		}
	}
	return nil
}

// fault records a fault of a kind in the history, at the time it is
// injected. Its What is "KIND: DETAIL"; the report groups faults by kind.
func (r *run) fault(kind, format string, args ...any) {
	what := kind + ": " + fmt.Sprintf(format, args...)
	_ = r.faults.Fault(time.Now(), what)
	_ = r.faults.Flush()
	r.mu.Lock()
	r.nFaults++
	r.mu.Unlock()
	r.logf("fault: %s", what)
}

// statusJSON is the part of `outbox status -o json` the harness reads.
type statusJSON struct {
	Total struct {
		Pending int `json:"pending"`
		Due     int `json:"due"`
		Parked  int `json:"parked"`
	} `json:"total"`
	ByPartition []struct {
		Partition int `json:"partition"`
		Lease     *struct {
			Owner   string    `json:"owner"`
			Expires time.Time `json:"expires"`
		} `json:"lease"`
	} `json:"by_partition"`
}

func (r *run) status(ctx context.Context) (*statusJSON, error) {
	return readStatus(ctx, r.h.outbox, r.storeURL, r.storeArgs...)
}

// backoffGrace is how much longer waitDrained waits, past its limit,
// while every due entry is held back behind a key head that waits for its
// retry time: a long broker outage (a RabbitMQ node that took 23 s to
// serve again, in one CI run) leaves head entries with enough failed
// attempts that the relay's backoff (500 ms doubling per attempt) puts
// their next try a minute or two away, and the entries behind them count
// as due though per-key order holds them back. Nothing is stuck then; the
// relays are waiting as told.
const backoffGrace = 3 * time.Minute

// headSlack is how long a key head may have been due, past its retry
// time, and still count as waiting: the relays fetch once a poll interval
// (250 ms) and a round may be in flight.
const headSlack = 5 * time.Second

// waitDrained waits until nothing is pending (everything published or
// parked). Parked entries make the check report them lost, which they are
// as far as the consumer is concerned. Past limit it goes on waiting, up
// to backoffGrace, only while every due entry waits behind a key head
// whose retry time has not come (see backingOff).
func (r *run) waitDrained(ctx context.Context, limit time.Duration) error {
	start := time.Now()
	deadline := start.Add(limit)
	extended := false
	var last error
	for {
		if now := time.Now(); !now.Before(deadline) {
			if extended || last != nil || now.Sub(start) >= limit+backoffGrace {
				break
			}
		}
		s, err := r.status(ctx)
		if err == nil && s.Total.Pending == 0 {
			if s.Total.Parked > 0 {
				r.logf("drained with %d parked entries", s.Total.Parked)
			}
			return nil
		}
		last = err
		if err == nil && !time.Now().Before(deadline) {
			waiting, why, berr := r.backingOff(ctx, s.Total.Due)
			switch {
			case berr != nil:
				last = berr
			case waiting && !extended:
				extended = true
				deadline = start.Add(limit + backoffGrace)
				r.logf("not drained after %v, but every due entry of the %d pending waits behind a key head that waits for its retry backoff: waiting up to %v more", limit, s.Total.Pending, backoffGrace)
			case !waiting:
				return fmt.Errorf("not drained after %v: %d entries still pending, %d of them due: %s", time.Since(start).Round(time.Second), s.Total.Pending, s.Total.Due, why)
			}
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
	if last != nil {
		return fmt.Errorf("not drained after %v: %v", time.Since(start).Round(time.Second), last)
	}
	return fmt.Errorf("not drained after %v: entries still pending", time.Since(start).Round(time.Second))
}

// blockedJSON is the part of `outbox blocked -o json` the harness reads.
type blockedJSON struct {
	Blocked []struct {
		Key  string `json:"key"`
		Head struct {
			ID    string     `json:"id"`
			DueAt *time.Time `json:"due_at"`
		} `json:"head"`
		Waiting int64 `json:"waiting"`
	} `json:"blocked"`
	NextAfter *string `json:"next_after"`
}

// backingOff reports whether the relays are only waiting for retry
// backoff (see waitingForBackoff).
func (r *run) backingOff(ctx context.Context, due int) (waiting bool, why string, err error) {
	args := append([]string{"blocked", "-o", "json", "--limit", "10000", "--timeout", "10s", "--store", r.storeURL}, r.storeArgs...)
	out, err := r.outbox(ctx, args...)
	if err != nil {
		return false, "", fmt.Errorf("outbox blocked: %v: %s", err, out)
	}
	var b blockedJSON
	if err := json.Unmarshal(out, &b); err != nil {
		return false, "", fmt.Errorf("outbox blocked -o json: %v: %s", err, out)
	}
	waiting, why = waitingForBackoff(b, due, time.Now())
	return waiting, why, nil
}

// waitingForBackoff reports whether no blocked key's head has been due for
// more than headSlack at now and the due entries are no more than those
// waiting behind the heads; otherwise why names what is due and not taken.
func waitingForBackoff(b blockedJSON, due int, now time.Time) (waiting bool, why string) {
	if b.NextAfter != nil {
		return false, "more blocked keys than one page lists"
	}
	var behind int64
	for _, k := range b.Blocked {
		if k.Head.DueAt == nil {
			continue
		}
		if now.Sub(*k.Head.DueAt) > headSlack {
			return false, fmt.Sprintf("key %q: its head %s has been due since %s", k.Key, k.Head.ID, k.Head.DueAt.Format(time.RFC3339Nano))
		}
		behind += k.Waiting
	}
	if int64(due) > behind {
		return false, fmt.Sprintf("%d due entries are not behind a key head waiting for its backoff (%d are)", int64(due)-behind, behind)
	}
	return true, ""
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var errNoRelay = errors.New("no relay is running")
