package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox/chaos/history"
	"github.com/outboxrelay/outbox/chaos/internal/broker"
	"github.com/outboxrelay/outbox/chaos/internal/proc"
	"github.com/outboxrelay/outbox/chaos/internal/servers"
	"github.com/outboxrelay/outbox/chaos/internal/soak"
)

// Negative controls (soakSpec.control).
const (
	controlLeak       = "leak"           // relay-0 is `chaos control-relay -mode leak`
	controlAutovacuum = "autovacuum-off" // PostgreSQL with autovacuum = off
)

// stampHeader is the header the appenders stamp each attempt's time in.
const stampHeader = "soak-stamp"

// soakSpec is one run of the soak: a backend's, or a negative control's.
type soakSpec struct {
	name     string // "postgres", "redis", "control-leak", "control-autovacuum-off"
	backend  string
	control  string // "" for a backend's run
	relays   int
	rate     int // entries/s; 0: calibrate
	duration time.Duration
	faults   bool
}

// soakSpecs lists the runs cfg asks for: the backends, then the controls.
func soakSpecs(cfg soakConfig) []soakSpec {
	var specs []soakSpec
	if cfg.controls {
		specs = append(specs,
			soakSpec{name: "control-" + controlLeak, backend: backendNameRedis, control: controlLeak, relays: 1, rate: 20, duration: cfg.controlDur},
			soakSpec{name: "control-" + controlAutovacuum, backend: backendNamePostgres, control: controlAutovacuum, relays: 1, rate: cfg.controlRate, duration: cfg.controlDur},
		)
		if cfg.short {
			for i := range specs {
				specs[i].duration = cfg.duration
			}
		}
	}
	for _, b := range cfg.backends {
		specs = append(specs, soakSpec{name: b, backend: b, relays: cfg.relays, rate: cfg.rate, duration: cfg.duration, faults: true})
	}
	return specs
}

// relayFeat is what this build of `outbox relay` accepts of the flags the
// soak would like to pass (the retention and health flags of issue 32).
type relayFeat struct {
	archive, retention, retentionInterval, healthInterval bool
}

func (f relayFeat) String() string {
	var have, lack []string
	for _, x := range []struct {
		name string
		ok   bool
	}{{"--archive", f.archive}, {"--archive-retention", f.retention}, {"--retention-interval", f.retentionInterval}, {"--health-interval", f.healthInterval}} {
		if x.ok {
			have = append(have, x.name)
		} else {
			lack = append(lack, x.name)
		}
	}
	s := "flags " + strings.Join(have, " ")
	if len(have) == 0 {
		s = "none of the retention flags"
	}
	if len(lack) > 0 {
		s += " (not: " + strings.Join(lack, " ") + "; the soak runs without them)"
	}
	return s
}

// relayFeatures asks `outbox relay --help` which of the flags it has.
func relayFeatures(ctx context.Context, bin string) relayFeat {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, bin, "relay", "--help").CombinedOutput()
	s := string(out)
	return relayFeat{
		archive:           strings.Contains(s, "--archive "),
		retention:         strings.Contains(s, "--archive-retention"),
		retentionInterval: strings.Contains(s, "--retention-interval"),
		healthInterval:    strings.Contains(s, "--health-interval"),
	}
}

// soakRelay is one relay process of a soak run.
type soakRelay struct {
	slot, gen int
	name      string // relay-N: its application_name / client name suffix
	metrics   string // 127.0.0.1:PORT of --metrics-addr; "" for the leak control
	p         *proc.Proc
	removed   float64 // the last outbox_retention_removed_total read
}

// soakRun is one spec's run.
type soakRun struct {
	h    *harness
	cfg  soakConfig
	feat relayFeat
	spec soakSpec
	id   string
	dir  string
	log  *os.File

	storeURL string
	pg       *servers.Postgres
	rds      *servers.Redis
	pool     *pgxpool.Pool // the samples' connections to pg
	rc       *redis.Client // the samples' client of rds
	broker   *broker.Broker
	faults   *history.Writer
	cleanup  []func()

	mu       sync.Mutex
	relays   []*soakRelay
	apps     []*proc.Proc
	histFile []string
	events   []string

	lat       *soak.Latencies
	delivered atomic.Int64
	removed   float64 // retention_removed over every relay generation
}

func (r *soakRun) logf(format string, args ...any) {
	if r.log != nil {
		fmt.Fprintf(r.log, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

// event records a line of the run's timeline (kept for the report).
func (r *soakRun) event(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.events = append(r.events, line)
	r.mu.Unlock()
	r.logf("event: %s", line)
}

// setup starts the private server, migrates the outbox and starts the
// broker.
func (r *soakRun) setup(ctx context.Context) error {
	sdir := filepath.Join(r.dir, "server")
	if err := os.MkdirAll(sdir, 0o755); err != nil {
		return err
	}
	switch r.spec.backend {
	case backendNamePostgres:
		pg, err := servers.StartPostgres(ctx, sdir)
		if err != nil {
			return notInstalled(err)
		}
		r.pg = pg
		r.cleanup = append(r.cleanup, func() { _ = pg.Close() })
		r.storeURL = pg.URL()
		if err := r.configurePostgres(ctx); err != nil {
			return err
		}
		pc, err := pgxpool.ParseConfig(r.storeURL)
		if err != nil {
			return err
		}
		pc.MaxConns = 2
		pc.ConnConfig.RuntimeParams["application_name"] = "soak-sampler"
		if r.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
			return err
		}
		r.cleanup = append(r.cleanup, r.pool.Close)
	case backendNameRedis:
		rds, err := servers.StartRedis(ctx, sdir, servers.RedisOptions{})
		if err != nil {
			return notInstalled(err)
		}
		r.rds = rds
		r.cleanup = append(r.cleanup, func() { _ = rds.Close() })
		r.storeURL = rds.URL()
		r.rc = redis.NewClient(&redis.Options{Addr: rds.Addr()})
		r.cleanup = append(r.cleanup, func() { _ = r.rc.Close() })
	}
	if out, err := r.outbox(ctx, "migrate", "up", "--store", r.storeURL, "--partitions", strconv.Itoa(r.cfg.partitions)); err != nil {
		return fmt.Errorf("outbox migrate up: %v\n%s", err, out)
	}
	bdir := filepath.Join(r.dir, "broker")
	if err := os.MkdirAll(bdir, 0o755); err != nil {
		return err
	}
	b, err := broker.Start(ctx, r.h.kfake, bdir, broker.Options{Partitions: r.cfg.partitions, Topics: []string{topic}})
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	r.broker = b
	r.cleanup = append(r.cleanup, func() { _ = b.Close() })
	return nil
}

// configurePostgres sets the server's autovacuum for the run: off for
// the autovacuum-off control, else on with the configured naptime.
func (r *soakRun) configurePostgres(ctx context.Context) error {
	var stmts []string
	switch {
	case r.spec.control == controlAutovacuum:
		stmts = append(stmts, "ALTER SYSTEM SET autovacuum = off")
	case r.cfg.naptime > 0:
		stmts = append(stmts, fmt.Sprintf("ALTER SYSTEM SET autovacuum_naptime = '%ds'", int(r.cfg.naptime.Seconds())))
	}
	stmts = append(stmts, "SELECT pg_reload_conf()")
	c, err := pgx.Connect(ctx, r.storeURL)
	if err != nil {
		return fmt.Errorf("configuring the private PostgreSQL: %w", err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	for _, s := range stmts {
		if _, err := c.Exec(ctx, s); err != nil {
			return fmt.Errorf("configuring the private PostgreSQL: %s: %w", s, err)
		}
	}
	// pg_reload_conf only signals: wait until the setting shows.
	want, setting := "on", "autovacuum"
	if r.spec.control == controlAutovacuum {
		want = "off"
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		var got string
		if err := c.QueryRow(ctx, "SELECT current_setting('"+setting+"')").Scan(&got); err != nil {
			return err
		}
		if got == want {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("configuring the private PostgreSQL: autovacuum is %s after the reload, want %s", got, want)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	r.logf("private PostgreSQL at port %d: autovacuum %s, naptime %v", r.pg.Port(), want, r.cfg.naptime)
	return nil
}

func (r *soakRun) outbox(ctx context.Context, args ...string) ([]byte, error) {
	return runOutbox(ctx, r.h.outbox, args...)
}

// sessionName is the application_name (Postgres) or client name (Redis)
// of a relay slot's connections: what the connection kill picks them by.
func (r *soakRun) sessionName(slot int) string {
	return fmt.Sprintf("soak-%s-relay-%d", r.id, slot)
}

// relayStore is the store URL of a relay slot, naming its connections.
func (r *soakRun) relayStore(slot int) string {
	u, err := url.Parse(r.storeURL)
	if err != nil {
		return r.storeURL
	}
	q := u.Query()
	if r.spec.backend == backendNamePostgres {
		q.Set("application_name", r.sessionName(slot))
	} else {
		q.Set("client_name", r.sessionName(slot))
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// relayArgs are `outbox relay`'s flags for a slot.
func (r *soakRun) relayArgs(slot int, owner, metrics string) []string {
	args := []string{"relay",
		"--store", r.relayStore(slot),
		"--kafka-brokers", r.broker.Brokers(),
		"--owner", owner,
		"--log-format", "json",
		"--drain-timeout", "5s",
		"--metrics-addr", metrics,
	}
	f := r.feat
	if r.spec.backend == backendNamePostgres && r.spec.control == "" && f.archive && f.retention {
		args = append(args, "--archive", "--archive-retention", r.cfg.retention.String())
		if f.retentionInterval {
			args = append(args, "--retention-interval", r.cfg.retInterval.String())
		}
	}
	if f.healthInterval {
		args = append(args, "--health-interval", r.cfg.sample.String())
	}
	return args
}

// startRelay starts slot's relay, a new generation of it.
func (r *soakRun) startRelay(slot int) error {
	r.mu.Lock()
	gen := 0
	if slot < len(r.relays) && r.relays[slot] != nil {
		gen = r.relays[slot].gen + 1
	}
	r.mu.Unlock()
	name := fmt.Sprintf("relay-%d", slot)
	owner := fmt.Sprintf("%s.%d", name, gen)
	bin, args, metrics := r.h.outbox, []string(nil), ""
	if r.spec.control == controlLeak {
		bin = r.h.self
		args = []string{"control-relay", "-mode", "leak", "-store", r.relayStore(slot), "-kafka-brokers", r.broker.Brokers(),
			"-leak-rate", strconv.FormatInt(leakRate(r.spec.duration), 10)}
	} else {
		port, err := freePort()
		if err != nil {
			return err
		}
		metrics = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		args = r.relayArgs(slot, owner, metrics)
	}
	p, err := proc.Start(name, filepath.Join(r.dir, name+".log"), bin, args, nil)
	if err != nil {
		return err
	}
	rp := &soakRelay{slot: slot, gen: gen, name: name, metrics: metrics, p: p}
	r.mu.Lock()
	for len(r.relays) <= slot {
		r.relays = append(r.relays, nil)
	}
	r.relays[slot] = rp
	r.mu.Unlock()
	r.logf("started %s as %s (PID %d, metrics %s)", name, owner, p.PID(), metrics)
	return nil
}

// leakRate is the leak control's bytes per second: 64 MiB over the
// control's load, so that the growth is four times the RSS bound's
// floor whatever the duration.
func leakRate(d time.Duration) int64 {
	return int64(float64(64<<20) / d.Seconds())
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("picking a port for --metrics-addr: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port, nil
}

func (r *soakRun) stopRelays() {
	r.mu.Lock()
	var ps []*proc.Proc
	for _, rp := range r.relays {
		if rp != nil {
			ps = append(ps, rp.p)
		}
	}
	r.mu.Unlock()
	terminateAll(ps, 15*time.Second, r.logf)
}

// startAppenders starts n appenders named PREFIX0.. at rate entries/s
// over all of them (0: as fast as they go).
func (r *soakRun) startAppenders(prefix string, n, rate int) error {
	for i := range n {
		name := fmt.Sprintf("%s%d", prefix, i)
		hist := filepath.Join(r.dir, name+".jsonl")
		workers := 4
		perRate := "0"
		if rate > 0 {
			perRate = strconv.FormatFloat(float64(rate)/float64(n), 'f', 2, 64)
		} else {
			workers = 8
		}
		args := []string{"appender",
			"-store", r.storeURL,
			"-name", fmt.Sprintf("%s-%s", r.id, name),
			"-keys", strconv.Itoa(r.cfg.keys),
			"-topic", topic,
			"-rate", perRate,
			"-workers", strconv.Itoa(workers),
			"-history", hist,
			"-stamp-header", stampHeader,
		}
		p, err := proc.Start(name, filepath.Join(r.dir, name+".log"), r.h.self, args, nil)
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.apps = append(r.apps, p)
		r.histFile = append(r.histFile, hist)
		r.mu.Unlock()
	}
	return nil
}

func (r *soakRun) stopAppenders() {
	r.mu.Lock()
	apps := r.apps
	r.apps = nil
	r.mu.Unlock()
	terminateAll(apps, 20*time.Second, r.logf)
}

// checkAlive fails when an appender or a relay exited on its own.
func (r *soakRun) checkAlive() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := exitedApp(r.apps); err != nil {
		return err
	}
	for _, rp := range r.relays {
		if rp == nil {
			continue
		}
		if done, err := rp.p.Exited(); done {
			return fmt.Errorf("%s (generation %d) exited on its own (%v); see %s", rp.name, rp.gen, err, rp.p.Log)
		}
	}
	return nil
}

// status is `outbox status -o json`'s totals.
func (r *soakRun) status(ctx context.Context) (*statusJSON, error) {
	return readStatus(ctx, r.h.outbox, r.storeURL)
}

// waitDrained waits until nothing is pending.
func (r *soakRun) waitDrained(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		s, err := r.status(ctx)
		if err == nil && s.Total.Pending == 0 {
			return nil
		}
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("%d entries still pending", s.Total.Pending)
		}
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
	}
	return fmt.Errorf("not drained after %v: %v", limit, last)
}

// checkHistory reads what the broker holds and checks it against the
// appenders' histories and the faults.
func (r *soakRun) checkHistory(ctx context.Context) (*history.Report, error) {
	ds, err := r.broker.Consume(ctx, topic)
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
	r.mu.Lock()
	files := append([]string{filepath.Join(r.dir, "faults.jsonl"), dpath}, r.histFile...)
	r.mu.Unlock()
	hist, err := history.ReadFiles(files...)
	if err != nil {
		return nil, err
	}
	rep := hist.Check()
	return &rep, nil
}
