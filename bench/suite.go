package main

import (
	"bufio"
	"context"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Suite holds the connections, the results and the failures of one run.
type Suite struct {
	cfg      Config
	pool     *pgxpool.Pool // 16 connections: 8 callers plus relays and drainers
	rdb      *redis.Client // logical database cfg.RedisDB
	info     MachineInfo
	mu       sync.Mutex
	results  []*Result
	failures []string
	// latRate remembers each of our backends' sustainable end-to-end rate
	// (W3) and the round that measured it, for River's W3 points, which
	// run at the same arrival rates later in the round.
	latRate map[string]roundRate
	// run is the round being run: every workload runs once per round, so
	// the runs of all systems interleave and the machine's drift hits them
	// alike.
	run int
	acc map[string]*series
	// keep holds what lives across rounds (W4's big backlog), closed at
	// the end.
	keep     map[string]any
	cleanups []func()
}

// thisRun yields the current round's index once: workloads loop over it
// as they would over all runs.
func (s *Suite) thisRun() iter.Seq[int] {
	return func(yield func(int) bool) { yield(s.run) }
}

// sr returns the series named name, kept across rounds.
func (s *Suite) sr(name string) *series {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.acc[name] == nil {
		s.acc[name] = &series{}
	}
	return s.acc[name]
}

// MachineInfo describes where the figures were measured.
type MachineInfo struct {
	Date     string            `json:"date"`
	CPU      string            `json:"cpu"`
	Cores    int               `json:"cores"`
	MemoryGB float64           `json:"memory_gib"`
	Go       string            `json:"go"`
	Postgres string            `json:"postgres"`
	Redis    string            `json:"redis"`
	Peers    map[string]string `json:"peers"`
	Quick    bool              `json:"quick"`
	N        int               `json:"n"`
	N1       int               `json:"n1"`
	Runs     int               `json:"runs"`
	Elapsed  string            `json:"elapsed"`
}

type workload struct {
	name string
	fn   func(ctx context.Context) error
}

func newSuite(ctx context.Context, cfg Config) (*Suite, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.PGURL)
	if err != nil {
		return nil, fmt.Errorf("OUTBOX_POSTGRES_URL: %w", err)
	}
	pcfg.MaxConns = 24
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres at %s is not reachable (%w); start it or set OUTBOX_POSTGRES_URL", cfg.PGURL, err)
	}
	ropt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("OUTBOX_REDIS_URL: %w", err)
	}
	ropt.DB = cfg.RedisDB
	ropt.PoolSize = 64
	rdb := redis.NewClient(ropt)
	if err := rdb.Ping(ctx).Err(); err != nil {
		pool.Close()
		return nil, fmt.Errorf("redis at %s is not reachable (%w); start it or set OUTBOX_REDIS_URL", cfg.RedisURL, err)
	}
	s := &Suite{cfg: cfg, pool: pool, rdb: rdb, latRate: map[string]roundRate{}, acc: map[string]*series{}, keep: map[string]any{}}
	s.info = machineInfo(ctx, s)
	// What an interrupted run left behind: an outbox stores its partition
	// count, so a leftover table or key prefix that a new instance's name
	// meets would refuse the new count.
	s.dropAll()
	return s, nil
}

func (s *Suite) close() {
	// Last made, first closed: a backlog kept across rounds goes before
	// the connection it lives on.
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.dropAll()
	s.rdb.Close()
	s.pool.Close()
}

// dropAll drops the harness's schemas and deletes its Redis keys.
func (s *Suite) dropAll() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, schema := range allSchemas {
		if _, err := s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
			s.logf("cleanup: dropping schema %s: %v", schema, err)
		}
	}
	for _, pattern := range allRedisPatterns {
		if err := deleteKeys(ctx, s.rdb, pattern); err != nil {
			s.logf("cleanup: deleting %s: %v", pattern, err)
		}
	}
}

// allSchemas and allRedisPatterns are everything the harness creates; they
// are dropped at the end of the run.
var (
	allSchemas       = []string{schemaRaw, schemaRawBig, schemaRawSmall, schemaRiver, schemaWatermill, schemaOurs, schemaInbox}
	allRedisPatterns = []string{"{rawbench*", "asynq:*", "{obench*", "{ibench*"}
)

func (s *Suite) workloads() []workload {
	return []workload{
		// The raw W4 loops are workloads of their own, named like our
		// sub-workloads ("postgres W4 backlog"): -skip 'W4' leaves them
		// out with ours, -only 'raw' or 'raw/postgres' keeps them.
		{"raw/postgres", s.rawPostgres},
		{"raw/postgres W4 backlog", s.rawPostgresBacklog},
		{"raw/redis", s.rawRedis},
		{"raw/redis W4 backlog", s.rawRedisBacklog},
		{"river", s.river},
		{"watermill", s.watermill},
		{"asynq", s.asynq},
		{"outbox/postgres", func(ctx context.Context) error { return s.ours(ctx, s.postgresTarget()) }},
		{"outbox/redis", func(ctx context.Context) error { return s.ours(ctx, s.redisTarget()) }},
		// River's W3 points run at the arrival rates our W3 measured
		// earlier in the round.
		{riverW3Name, s.riverW3},
		// Issue 32: notifications under 8, 32 and 128 callers (after our
		// W3, whose sustainable rate its latency half uses), and the
		// latency point at about 50% CPU.
		{notifyWorkloadName, s.notifyWorkload},
		{cpu50Name, s.cpu50},
		{"W8 move", s.moveWorkload},
		// The brokers of issue 29's sinks: our relay and sink against
		// the broker's raw client, in the same round.
		{"nats", func(ctx context.Context) error { return s.brokerWorkload(ctx, "nats") }},
		{"rabbitmq", func(ctx context.Context) error { return s.brokerWorkload(ctx, "rabbitmq") }},
		// MySQL (issue 30): the raw limits, Watermill SQL's MySQL
		// subscriber and our backend on the same server, in one round.
		{"mysql", s.mysqlWorkload},
		// The inbox (issue 31): the consumer with the inbox against the
		// same consumer without it, and a kafkainbox consumer group.
		{"inbox", s.inboxWorkload},
	}
}

// selectedWorkload reports whether w runs: by its name, or, for one of
// our backends ("outbox/postgres"), because -only names one of its parts
// ("postgres W5 relays"); -skip naming the workload leaves it out.
func (s *Suite) selectedWorkload(w workload) bool {
	if s.selected(w.name) {
		return true
	}
	if w.name == riverW3Name {
		// River's W3 points also run with our W3 ("-only 'postgres W3'").
		return !s.skipped(w.name) && s.onlyNamesOurW3()
	}
	if w.name == "nats" || w.name == "rabbitmq" {
		return s.brokerSelected(w.name)
	}
	if w.name == "mysql" {
		return s.mysqlSelected()
	}
	if w.name == "inbox" {
		return s.inboxSelected()
	}
	backend, ours := strings.CutPrefix(w.name, "outbox/")
	if !ours || s.cfg.Only == nil || (s.cfg.Skip != nil && s.cfg.Skip.MatchString(w.name)) {
		return false
	}
	for _, sub := range s.oursSubs(backend) {
		if s.cfg.Only.MatchString(sub) {
			return true
		}
	}
	return false
}

func (s *Suite) selected(name string) bool {
	if s.cfg.Only != nil && !s.cfg.Only.MatchString(name) {
		return false
	}
	return !s.skipped(name)
}

// skipped reports whether -skip names name.
func (s *Suite) skipped(name string) bool {
	return s.cfg.Skip != nil && s.cfg.Skip.MatchString(name)
}

func (s *Suite) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// fail records a problem that makes the run exit non-zero.
func (s *Suite) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.logf("FAIL: %s", msg)
	s.mu.Lock()
	s.failures = append(s.failures, msg)
	s.mu.Unlock()
}

// recreateSchema drops and recreates a schema of the harness and runs ddl
// in it. The pool's connections are then replaced: their cached prepared
// statements may refer to the dropped tables.
func (s *Suite) recreateSchema(ctx context.Context, schema, ddl string) error {
	if _, err := s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema+";"+ddl); err != nil {
		return err
	}
	s.pool.Reset()
	return nil
}

// analyze runs ANALYZE on the given (quoted) tables. Every Postgres
// backlog, ours, the peers' and the raw one, is analyzed after it is filled
// and before its drain is timed: a freshly filled table has no statistics
// until autovacuum gets to it, and a plan made without them (a sequential
// scan and sort of the whole backlog per claim, for the raw statement)
// would make a figure depend on autovacuum's timing.
func (s *Suite) analyze(ctx context.Context, tables ...string) error {
	_, err := s.pool.Exec(ctx, "ANALYZE "+strings.Join(tables, ", "))
	return err
}

// analyzeSchema runs ANALYZE on every table of schema.
func (s *Suite) analyzeSchema(ctx context.Context, schema string) error {
	rows, err := s.pool.Query(ctx, "SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	if len(names) == 0 {
		return nil
	}
	tables := make([]string, len(names))
	for i, n := range names {
		tables[i] = pgx.Identifier{schema, n}.Sanitize()
	}
	return s.analyze(ctx, tables...)
}

// settle waits (at most 30 s) until Redis has freed what earlier workloads
// deleted: UNLINK frees a large key in a background thread, which would
// otherwise take CPU from the next workload's timed part on a 2-core
// machine. (It was added for W4's 1M-vs-10k drain, 0.43-0.46x inside a
// full run against 0.87-0.91x alone; it did not close that gap, see
// analysis.md.)
func (s *Suite) settle(ctx context.Context) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		info, err := s.rdb.Info(ctx, "memory").Result()
		if err != nil {
			return
		}
		pending := ""
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "lazyfree_pending_objects:"); ok {
				pending = v
			}
		}
		if pending == "" || pending == "0" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// redisMemory returns the server's memory figures that bear on how fast
// it walks a large key (INFO memory): what it holds, what the allocator
// and the OS give it, and the fragmentation between them.
func (s *Suite) redisMemory(ctx context.Context) string {
	info, err := s.rdb.Info(ctx, "memory").Result()
	if err != nil {
		return "INFO memory: " + err.Error()
	}
	want := []string{"used_memory_human", "used_memory_rss_human", "mem_fragmentation_ratio", "allocator_frag_ratio", "allocator_rss_ratio", "lazyfree_pending_objects"}
	var out []string
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && slices.Contains(want, k) {
			out = append(out, k+"="+v)
		}
	}
	return strings.Join(out, " ")
}

// deleteKeys removes the keys matching pattern with SCAN and UNLINK, so
// nothing but the harness's own keys is touched.
func deleteKeys(ctx context.Context, rdb *redis.Client, pattern string) error {
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	batch := make([]string, 0, 1000)
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == cap(batch) {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return rdb.Unlink(ctx, batch...).Err()
	}
	return nil
}

func machineInfo(ctx context.Context, s *Suite) MachineInfo {
	mi := MachineInfo{
		Date:  time.Now().UTC().Format("2006-01-02 15:04 MST"),
		Cores: runtime.NumCPU(),
		Go:    runtime.Version(),
		Peers: map[string]string{},
		Quick: s.cfg.Quick,
		N:     s.cfg.N,
		N1:    s.cfg.N1,
		Runs:  s.cfg.Runs,
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				mi.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
				mi.MemoryGB = float64(int(kb/1024/1024*10)) / 10
			}
		}
	}
	_ = s.pool.QueryRow(ctx, "SHOW server_version").Scan(&mi.Postgres)
	if info, err := s.rdb.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				mi.Redis = v
			}
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/riverqueue/river", "github.com/ThreeDotsLabs/watermill-sql/v4",
				"github.com/ThreeDotsLabs/watermill", "github.com/hibiken/asynq",
				"github.com/jackc/pgx/v5", "github.com/redis/go-redis/v9", "github.com/twmb/franz-go",
				"github.com/nats-io/nats.go", "github.com/rabbitmq/amqp091-go":
				mi.Peers[d.Path] = d.Version
			}
		}
	}
	return mi
}

func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// ---- payloads and delivery accounting ----

// PayloadSize is the size of every message body in every workload.
const PayloadSize = 256

// Aggregates is the number of distinct keys entries are spread over.
const Aggregates = 1000

// payload returns the 256-byte body of message seq: a JSON string (so the
// Watermill peers can store it in their default JSON column) that starts
// with the sequence number and the key's own sequence number.
//
//	"<seq:10>-<keyseq:10>-xxxx…"
func payload(seq, keySeq int) []byte {
	b := make([]byte, PayloadSize)
	b[0] = '"'
	copy(b[1:], fmt.Sprintf("%010d-%010d-", seq, keySeq))
	for i := 23; i < PayloadSize-1; i++ {
		b[i] = 'x'
	}
	b[PayloadSize-1] = '"'
	return b
}

// parsePayload returns the sequence numbers encoded by payload.
func parsePayload(b []byte) (seq, keySeq int, err error) {
	if len(b) != PayloadSize || b[0] != '"' || b[11] != '-' || b[22] != '-' {
		return 0, 0, fmt.Errorf("payload is not one of the harness's (%d bytes: %.30q)", len(b), b)
	}
	seq, err = strconv.Atoi(string(b[1:11]))
	if err != nil {
		return 0, 0, err
	}
	keySeq, err = strconv.Atoi(string(b[12:22]))
	return seq, keySeq, err
}

// messages is a prepared set of n messages: message i has key keys[i]
// and is the keySeq[i]-th message of that key.
type messages struct {
	keys    []string
	keySeq  []int
	payload [][]byte
}

func newMessages(n int, seed uint64) *messages {
	r := rand.New(rand.NewPCG(seed, 42))
	m := &messages{keys: make([]string, n), keySeq: make([]int, n), payload: make([][]byte, n)}
	next := make([]int, Aggregates)
	for i := range n {
		k := r.IntN(Aggregates)
		m.keys[i] = "agg-" + strconv.Itoa(k)
		m.keySeq[i] = next[k]
		next[k]++
		m.payload[i] = payload(i, m.keySeq[i])
	}
	return m
}

// tracker counts the deliveries of messages 0..n-1: it detects losses,
// duplicates, foreign messages and per-key order violations.
type tracker struct {
	n         int
	counts    []atomic.Int32
	recvAt    []atomic.Int64 // unix ns of the first delivery
	unique    atomic.Int64
	total     atomic.Int64
	foreign   atomic.Int64
	done      chan struct{}
	closeOnce sync.Once

	orderMu    sync.Mutex
	lastKeySeq map[string]int
	violations int
}

func newTracker(n int) *tracker {
	return &tracker{n: n, counts: make([]atomic.Int32, n), recvAt: make([]atomic.Int64, n), done: make(chan struct{}), lastKeySeq: map[string]int{}}
}

// mark records one delivery of message seq.
func (t *tracker) mark(seq int) {
	t.total.Add(1)
	if seq < 0 || seq >= t.n {
		t.foreign.Add(1)
		return
	}
	if t.counts[seq].Add(1) == 1 {
		t.recvAt[seq].Store(time.Now().UnixNano())
		if t.unique.Add(1) == int64(t.n) {
			t.closeOnce.Do(func() { close(t.done) })
		}
	}
}

// markPayload records the delivery of the message with body b.
func (t *tracker) markPayload(b []byte) {
	seq, _, err := parsePayload(b)
	if err != nil {
		t.mark(-1)
		return
	}
	t.mark(seq)
}

// markOrdered records a delivery and checks per-key order: the first
// delivery of a message must not come after a later message of its key.
func (t *tracker) markOrdered(key string, b []byte) {
	seq, keySeq, err := parsePayload(b)
	if err != nil {
		t.mark(-1)
		return
	}
	t.orderMu.Lock()
	if seq >= 0 && seq < t.n && t.counts[seq].Load() == 0 {
		if last, ok := t.lastKeySeq[key]; ok && keySeq < last {
			t.violations++
		}
		if last, ok := t.lastKeySeq[key]; !ok || keySeq > last {
			t.lastKeySeq[key] = keySeq
		}
	}
	t.orderMu.Unlock()
	t.mark(seq)
}

// stallTimeout fails a wait when no new message arrived for this long.
const stallTimeout = 10 * time.Second

// wait blocks until every message was delivered, ctx ends, timeout passes
// or no new message arrived for stallTimeout.
func (t *tracker) wait(ctx context.Context, timeout time.Duration) error {
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, lastAt := t.unique.Load(), time.Now()
	for {
		select {
		case <-t.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tm.C:
			return fmt.Errorf("timed out after %s with %d of %d messages delivered", timeout, t.unique.Load(), t.n)
		case now := <-tick.C:
			if u := t.unique.Load(); u != last {
				last, lastAt = u, now
			} else if now.Sub(lastAt) >= stallTimeout {
				return fmt.Errorf("stalled: no new message for %s, %d of %d delivered", stallTimeout, u, t.n)
			}
		}
	}
}

// waitN is wait for the first k messages' worth of deliveries: it returns
// once k distinct messages arrived.
func (t *tracker) waitN(ctx context.Context, k int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for t.unique.Load() < int64(k) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s with %d of %d messages delivered", timeout, t.unique.Load(), k)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

// span is the time from the first first-delivery to the last one.
func (t *tracker) span() time.Duration {
	var lo, hi int64
	for i := range t.recvAt {
		v := t.recvAt[i].Load()
		if v == 0 {
			continue
		}
		if lo == 0 || v < lo {
			lo = v
		}
		hi = max(hi, v)
	}
	return time.Duration(hi - lo)
}

// Counts summarises a tracker.
type Counts struct {
	Expected        int `json:"expected"`
	Delivered       int `json:"delivered"`
	Duplicates      int `json:"duplicates"`
	Foreign         int `json:"foreign"`
	OrderViolations int `json:"order_violations"`
}

func (t *tracker) counts_() Counts {
	t.orderMu.Lock()
	v := t.violations
	t.orderMu.Unlock()
	u := int(t.unique.Load())
	return Counts{Expected: t.n, Delivered: u, Duplicates: int(t.total.Load()) - u - int(t.foreign.Load()), Foreign: int(t.foreign.Load()), OrderViolations: v}
}

// check returns an error unless every message was delivered and nothing
// foreign arrived; duplicates are an error unless allowDup.
func (c Counts) check(allowDup bool) error {
	var p []string
	if c.Delivered != c.Expected {
		p = append(p, fmt.Sprintf("%d of %d messages delivered (%d lost)", c.Delivered, c.Expected, c.Expected-c.Delivered))
	}
	if c.Foreign > 0 {
		p = append(p, fmt.Sprintf("%d messages that were never sent", c.Foreign))
	}
	if c.Duplicates > 0 && !allowDup {
		p = append(p, fmt.Sprintf("%d duplicates", c.Duplicates))
	}
	if c.OrderViolations > 0 {
		p = append(p, fmt.Sprintf("%d per-key order violations", c.OrderViolations))
	}
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("count wrong: %s", strings.Join(p, "; "))
}

// ---- running callers ----

// parallel runs fn(worker, i) for i in [0, n) over workers goroutines, each
// taking consecutive chunks of chunk items, and returns the first error and
// the elapsed time.
func parallel(ctx context.Context, workers, n, chunk int, fn func(ctx context.Context, lo, hi int) error) (time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				lo := int(next.Add(int64(chunk))) - chunk
				if lo >= n {
					return
				}
				hi := min(lo+chunk, n)
				if err := fn(ctx, lo, hi); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return el, first
}

// rate is entries per second.
func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// percentile of sorted durations (ms), p in [0,100].
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p / 100 * float64(len(sorted)-1))
	return sorted[i]
}

func sortedMS(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	slices.Sort(out)
	return out
}
