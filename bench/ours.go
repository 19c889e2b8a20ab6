package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

const schemaOurs = "bench_outbox"

// benchTopic is the topic of every entry (and the kfake topic).
const benchTopic = "bench"

// target is one of our backends, as the workloads W1-W5 see it.
type target struct {
	name  string // "postgres" or "redis"
	key   string // result key part: "pg" or "redis"
	title string // in workload names: "Postgres" or "Redis"
	// server is the command name of the store's server processes.
	server string
	open   func(ctx context.Context, partitions int) (*instance, error)
}

// instance is one fresh, empty outbox of a target.
type instance struct {
	store outbox.Store
	// append appends entries in one caller transaction and commits it.
	append func(ctx context.Context, entries []outbox.Entry) error
	// close closes the backend and deletes its tables or keys.
	close func()
	// analyze refreshes the planner statistics of a Postgres instance's
	// tables after a fill (nil for Redis).
	analyze func(ctx context.Context) error
}

var instanceSeq atomic.Int64

func (s *Suite) postgresTarget() target {
	return s.postgresTargetWith(nil)
}

// postgresTargetWith is postgresTarget with its Options changed by set.
func (s *Suite) postgresTargetWith(set func(*pgoutbox.Options)) target {
	return target{name: "postgres", key: "pg", title: "Postgres", server: "postgres", open: func(ctx context.Context, partitions int) (*instance, error) {
		if _, err := s.pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schemaOurs); err != nil {
			return nil, err
		}
		opts := pgoutbox.Options{Schema: schemaOurs, Table: "ob" + strconv.FormatInt(instanceSeq.Add(1), 10), Partitions: partitions, Logger: oursLogger()}
		if set != nil {
			set(&opts)
		}
		if err := pgoutbox.Migrate(ctx, s.pool, opts); err != nil {
			return nil, err
		}
		// The relay side gets a pool of its own, as a relay process (or a
		// service that gives its relay a dedicated pool) has: on the shared
		// pool its statements would queue behind the appenders' open
		// transactions, and W3 would measure pool waits.
		rcfg := s.pool.Config().Copy()
		rcfg.MaxConns = 8
		relayPool, err := pgxpool.NewWithConfig(ctx, rcfg)
		if err != nil {
			return nil, err
		}
		b, err := pgoutbox.New(ctx, relayPool, opts)
		if err != nil {
			relayPool.Close()
			return nil, err
		}
		return &instance{
			store: b,
			append: func(ctx context.Context, entries []outbox.Entry) error {
				return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, entries...) })
			},
			analyze: func(ctx context.Context) error {
				return s.analyze(ctx, pgx.Identifier{schemaOurs, opts.Table}.Sanitize(), pgx.Identifier{schemaOurs, opts.Table + "_lease"}.Sanitize())
			},
			close: func() {
				b.Close()
				relayPool.Close()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				for _, suffix := range []string{"", "_lease", "_archive", "_meta", "_member", "_migrations"} {
					if _, err := s.pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{schemaOurs, opts.Table + suffix}.Sanitize()); err != nil {
						s.logf("cleanup %s: %v", opts.Table, err)
					}
				}
			},
		}, nil
	}}
}

func (s *Suite) redisTarget() target {
	return target{name: "redis", key: "redis", title: "Redis", server: "redis-server", open: func(ctx context.Context, partitions int) (*instance, error) {
		tag := "obench" + strconv.FormatInt(instanceSeq.Add(1), 10)
		b, err := redisoutbox.New(ctx, s.rdb, redisoutbox.Options{Prefix: "{" + tag + "}", Partitions: partitions, Logger: oursLogger()})
		if err != nil {
			return nil, err
		}
		return &instance{
			store: b,
			append: func(ctx context.Context, entries []outbox.Entry) error {
				_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error { return b.AppendInTx(ctx, p, entries...) })
				return err
			},
			close: func() {
				b.Close()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := deleteKeys(ctx, s.rdb, "{"+tag+"*"); err != nil {
					s.logf("cleanup %s: %v", tag, err)
				}
			},
		}, nil
	}}
}

// entries builds the outbox entries of messages lo..hi-1.
func (m *messages) entries(lo, hi int) []outbox.Entry {
	es := make([]outbox.Entry, hi-lo)
	for i := range es {
		es[i] = outbox.Entry{Topic: benchTopic, Key: m.keys[lo+i], Payload: m.payload[lo+i]}
	}
	return es
}

// fill appends the messages, per entries per transaction, with 8 callers.
// Callers are key-affine: every message of one key is appended by the
// same caller, in message order, so the append order of a key is its
// message order and the sinks can check per-key order. (Concurrent
// transactions appending to one key have no order to keep.)
func (in *instance) fill(ctx context.Context, m *messages, per int) (time.Duration, error) {
	return in.fillTo(ctx, m, per, benchTopic)
}

// fillTo is fill with the entries' topic.
func (in *instance) fillTo(ctx context.Context, m *messages, per int, topic string) (time.Duration, error) {
	lanes := m.lanes(Callers)
	var wg sync.WaitGroup
	errs := make([]error, Callers)
	start := time.Now()
	for w := range Callers {
		wg.Go(func() {
			lane := lanes[w]
			for lo := 0; lo < len(lane) && ctx.Err() == nil; lo += per {
				hi := min(lo+per, len(lane))
				es := make([]outbox.Entry, 0, hi-lo)
				for _, i := range lane[lo:hi] {
					es = append(es, outbox.Entry{Topic: topic, Key: m.keys[i], Payload: m.payload[i]})
				}
				if err := in.append(ctx, es); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return el, err
	}
	if in.analyze != nil {
		if err := in.analyze(ctx); err != nil {
			return el, fmt.Errorf("ANALYZE after the fill: %w", err)
		}
	}
	return el, nil
}

// head returns the first n messages.
func (m *messages) head(n int) *messages {
	return &messages{keys: m.keys[:n], keySeq: m.keySeq[:n], payload: m.payload[:n]}
}

// lanes splits the message indexes over n callers by key, keeping message
// order within each lane.
func (m *messages) lanes(n int) [][]int {
	out := make([][]int, n)
	for i, k := range m.keys {
		l := keyLane(k, n)
		out[l] = append(out[l], i)
	}
	return out
}

func keyLane(key string, n int) int {
	k, _ := strconv.Atoi(key[len("agg-"):])
	return k % n
}

// pending reports the instance's pending count (every backend of ours is
// an Inspector).
func (in *instance) pending(ctx context.Context) (int64, error) {
	insp, ok := in.store.(outbox.Inspector)
	if !ok {
		return 0, errors.New("the backend is not an outbox.Inspector")
	}
	st, err := insp.Stats(ctx)
	return st.Pending, err
}

func (in *instance) expectPending(ctx context.Context, want int) error {
	got, err := in.pending(ctx)
	if err != nil {
		return err
	}
	if got != int64(want) {
		return fmt.Errorf("count wrong: %d pending, want %d", got, want)
	}
	return nil
}

// countSink is the no-op sink: it only counts and checks per-key order.
type countSink struct{ tr *tracker }

func (c countSink) Publish(_ context.Context, msgs []outbox.Entry) []error {
	for i := range msgs {
		c.tr.markOrdered(msgs[i].Key, msgs[i].Payload)
	}
	return make([]error, len(msgs))
}

// ackSink wraps the Kafka sink: what the broker acknowledged is counted.
type ackSink struct {
	inner outbox.Sink
	tr    *tracker
}

func (a ackSink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	errs := a.inner.Publish(ctx, msgs)
	for i, err := range errs {
		if err == nil {
			a.tr.markOrdered(msgs[i].Key, msgs[i].Payload)
		}
	}
	return errs
}

// KeepsKeyOrder passes the inner sink's outbox.KeyOrderer on.
func (a ackSink) KeepsKeyOrder() bool {
	ko, ok := a.inner.(outbox.KeyOrderer)
	return ok && ko.KeepsKeyOrder()
}

func relayOptions(extra func(*outbox.RelayOptions)) outbox.RelayOptions {
	o := outbox.RelayOptions{Logger: oursLogger()}
	if extra != nil {
		extra(&o)
	}
	return o
}

// drainRelay runs relays over store until every message of tr arrived,
// stops them and returns the elapsed time from the first Start.
func (s *Suite) drainRelay(ctx context.Context, store outbox.Store, sink outbox.Sink, tr *tracker, relays int, extra func(i int, o *outbox.RelayOptions)) (time.Duration, error) {
	rs := make([]*outbox.Relay, relays)
	for i := range rs {
		r, err := outbox.NewRelay(store, sink, relayOptions(func(o *outbox.RelayOptions) {
			if extra != nil {
				extra(i, o)
			}
		}))
		if err != nil {
			return 0, err
		}
		rs[i] = r
	}
	start := time.Now()
	for _, r := range rs {
		if err := r.Start(ctx); err != nil {
			return 0, err
		}
	}
	werr := tr.wait(ctx, drainTimeout(tr.n))
	el := time.Since(start)
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range rs {
		if err := r.Stop(stopCtx); err != nil {
			s.logf("relay stop: %v", err)
		}
	}
	return el, werr
}

// oursWorkload is one of the workloads run on each of our backends; its
// name, after the backend's ("postgres W5 relays"), is what -only and
// -skip match.
type oursWorkload struct {
	name string
	fn   func(context.Context, target) error
}

func (s *Suite) oursWorkloads() []oursWorkload {
	return []oursWorkload{
		{"W1+W2 append and drain", s.w1w2},
		{"W3 latency", s.w3},
		{"W4 backlog", s.w4},
		{"W5 relays", s.w5},
		{"W5 relays fleet", s.w5fleet},
		{"W6 poison", s.poison},
		{"W7 hot key", s.hotKey},
	}
}

// oursSubs names the workloads of our backend name as -only and -skip
// see them.
func (s *Suite) oursSubs(name string) []string {
	var subs []string
	for _, w := range s.oursWorkloads() {
		subs = append(subs, name+" "+w.name)
	}
	return subs
}

// oursSelected reports whether a workload of our backend runs: -only
// matches it or the backend ("outbox/postgres"), and -skip does not match
// it.
func (s *Suite) oursSelected(backend, sub string) bool {
	if s.cfg.Skip != nil && s.cfg.Skip.MatchString(sub) {
		return false
	}
	return s.cfg.Only == nil || s.cfg.Only.MatchString(sub) || s.cfg.Only.MatchString("outbox/"+backend)
}

// ours runs W1-W5 on one of our backends.
func (s *Suite) ours(ctx context.Context, t target) error {
	var errs []error
	for _, w := range s.oursWorkloads() {
		if ctx.Err() != nil {
			break
		}
		sub := t.name + " " + w.name
		if !s.oursSelected(t.name, sub) {
			continue
		}
		s.settle(ctx)
		t0 := time.Now()
		if err := w.fn(ctx, t); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", w.name, err))
			s.fail("outbox/%s %s: %v", t.name, w.name, err)
		}
		s.logf("   outbox/%s %s took %s", t.name, w.name, time.Since(t0).Round(100*time.Millisecond))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%d workload(s) failed", len(errs))
	}
	return nil
}

// w1w2: append 1/tx (then drain that backlog to kfake) and 100/tx (then
// drain that backlog to the no-op sink).
func (s *Suite) w1w2(ctx context.Context, t target) error {
	n := s.cfg.N
	msgs := newMessages(n, 6)
	app1, app100, noop, kafka := s.sr(t.key+".app1"), s.sr(t.key+".app100"), s.sr(t.key+".noop"), s.sr(t.key+".kafka")
	title := t.title
	n1 := s.cfg.N1
	for run := range s.thisRun() {
		// W1, 1 entry per transaction: N1 transactions.
		in, err := t.open(ctx, 1)
		if err != nil {
			return err
		}
		el, err := in.fill(ctx, msgs.head(n1), 1)
		if err == nil {
			err = in.expectPending(ctx, n1)
		}
		in.close()
		if err != nil {
			return fmt.Errorf("append 1/tx: %w", err)
		}
		app1.add(rate(n1, el), nil)

		// W1, 100 per transaction, then W2 to the no-op sink on that
		// backlog.
		in, err = t.open(ctx, 1)
		if err != nil {
			return err
		}
		el, err = in.fill(ctx, msgs, 100)
		if err == nil {
			err = in.expectPending(ctx, n)
		}
		if err != nil {
			in.close()
			return fmt.Errorf("append 100/tx: %w", err)
		}
		app100.add(rate(n, el), nil)

		tr := newTracker(n)
		c0 := readCPU(t.server)
		el, err = s.drainRelay(ctx, in.store, countSink{tr}, tr, 1, nil)
		if self, srv, ok := perEntry(c0, readCPU(t.server), n); ok && err == nil {
			s.logf("%s drain CPU per entry: relay process %v, %s %v, wall %v", t.name, self, t.server, srv, el/time.Duration(n))
		}
		cn := tr.counts_()
		if err == nil {
			err = cn.check(false)
		}
		if err == nil {
			err = in.expectPending(ctx, 0)
		}
		in.close()
		if err != nil {
			s.fail("outbox/%s drain run %d: %v", t.name, run+1, err)
		}
		noop.add(rate(n, el), &cn)

		// W2 to kfake on a fresh backlog (filled 100 per transaction).
		in, err = t.open(ctx, 1)
		if err != nil {
			return err
		}
		if _, err := in.fill(ctx, msgs, 100); err != nil {
			in.close()
			return err
		}
		c, el, err := s.drainToKfake(ctx, in.store, n)
		if err == nil {
			err = in.expectPending(ctx, 0)
		}
		in.close()
		if err != nil {
			s.fail("outbox/%s drain to kfake run %d: %v", t.name, run+1, err)
		}
		kafka.add(rate(n, el), &c)
	}
	if t.name == "postgres" {
		// What the appends' notifications cost: the same appends with
		// Options.NoNotify, in the same round.
		quiet := s.postgresTargetWith(func(o *pgoutbox.Options) { o.NoNotify = true })
		q1, q100 := s.sr(t.key+".app1.quiet"), s.sr(t.key+".app100.quiet")
		for _, c := range []struct {
			per, n int
			sr     *series
		}{{1, n1, q1}, {100, n, q100}} {
			in, err := quiet.open(ctx, 1)
			if err != nil {
				return err
			}
			el, err := in.fill(ctx, msgs.head(c.n), c.per)
			if err == nil {
				err = in.expectPending(ctx, c.n)
			}
			in.close()
			if err != nil {
				return fmt.Errorf("append %d/tx without notifications: %w", c.per, err)
			}
			c.sr.add(rate(c.n, el), nil)
		}
		s.record("ours.pg.append1.quiet", fmt.Sprintf("%s append, 1 entry/tx, %d callers", title, Callers), "outbox/postgres AppendInTx, NoNotify", "entries/s", true, q1, "no LISTEN/NOTIFY wake-ups: what the notifications cost")
		s.record("ours.pg.append100.quiet", fmt.Sprintf("%s append, 100 entries/tx, %d callers", title, Callers), "outbox/postgres AppendInTx, NoNotify", "entries/s", true, q100, "no LISTEN/NOTIFY wake-ups: what the notifications cost")
	}
	s.record("ours."+t.key+".append1", fmt.Sprintf("%s append, 1 entry/tx, %d callers", title, Callers), "outbox/"+t.name+" AppendInTx", "entries/s", true, app1, "")
	s.record("ours."+t.key+".append100", fmt.Sprintf("%s append, 100 entries/tx, %d callers", title, Callers), "outbox/"+t.name+" AppendInTx", "entries/s", true, app100, "")
	s.record("ours."+t.key+".drain.noop", s.drainTitle(title, "no-op sink"), "outbox/"+t.name+" relay", "entries/s", true, noop, "1 relay, BatchSize 500")
	s.record("ours."+t.key+".drain.kfake", s.drainTitle(title, "to kfake"), "outbox/"+t.name+" relay → kafkasink → kfake", "entries/s", true, kafka, "1 relay, BatchSize 500")
	return nil
}

// drainToKfake drains n entries through the Kafka sink into an in-process
// kfake cluster, then reads the topic back and checks every entry is there.
func (s *Suite) drainToKfake(ctx context.Context, store outbox.Store, n int) (Counts, time.Duration, error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, benchTopic))
	if err != nil {
		return Counts{}, 0, err
	}
	defer cluster.Close()
	sink, err := kafkasink.Dial(cluster.ListenAddrs(), kafkasink.Options{}, kgo.ProducerLinger(0))
	if err != nil {
		return Counts{}, 0, err
	}
	defer sink.Close()
	return s.drainAndReadBack(ctx, cluster, sink, store, n)
}

// drainAndReadBack drains n entries through sink with one relay, then
// reads the topic back from cluster and checks every entry is there, each
// key's first deliveries in order.
func (s *Suite) drainAndReadBack(ctx context.Context, cluster *kfake.Cluster, sink outbox.Sink, store outbox.Store, n int) (Counts, time.Duration, error) {
	tr := newTracker(n)
	el, err := s.drainRelay(ctx, store, ackSink{inner: sink, tr: tr}, tr, 1, nil)
	c := tr.counts_()
	if err != nil {
		return c, el, err
	}
	if err := c.check(false); err != nil {
		return c, el, err
	}
	// Read everything back from the broker.
	cons, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(benchTopic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return c, el, err
	}
	defer cons.Close()
	back := newTracker(n)
	rctx, cancel := context.WithTimeout(ctx, drainTimeout(n))
	defer cancel()
	for back.unique.Load() < int64(n) {
		fs := cons.PollFetches(rctx)
		if rctx.Err() != nil {
			return c, el, fmt.Errorf("count wrong: read back %d of %d records from kfake", back.unique.Load(), n)
		}
		fs.EachRecord(func(r *kgo.Record) { back.markOrdered(string(r.Key), r.Value) })
	}
	bc := back.counts_()
	if err := bc.check(false); err != nil {
		return c, el, fmt.Errorf("kfake read-back: %w", err)
	}
	return c, el, nil
}

// w4: claim latency and drain rate with a big backlog vs a small one,
// measured at the Store (lease, FindPendingBatch(500), MarkSent), which is
// what one relay worker does per batch.
func (s *Suite) w4(ctx context.Context, t target) error {
	title := t.title
	drainN := s.cfg.SmallBack
	bigRate, bigP50, bigP99 := s.sr(t.key+".big.rate"), s.sr(t.key+".big.p50"), s.sr(t.key+".big.p99")
	smallRate, smallP50, smallP99 := s.sr(t.key+".small.rate"), s.sr(t.key+".small.p50"), s.sr(t.key+".small.p99")

	// The big backlog is filled once and kept across rounds; each round
	// drains drainN entries off its front.
	type bigBacklog struct {
		in *instance
		tr *tracker
	}
	bb, _ := s.keep["w4."+t.key].(*bigBacklog)
	if bb == nil {
		big, err := t.open(ctx, 1)
		if err != nil {
			return err
		}
		s.cleanups = append(s.cleanups, big.close)
		msgs := newMessages(s.cfg.BigBack, 8)
		el, err := big.fill(ctx, msgs, 1000)
		if err != nil {
			return fmt.Errorf("filling %d: %w", s.cfg.BigBack, err)
		}
		s.logf("   W4: appended %d entries to %s in %s", s.cfg.BigBack, t.name, el.Round(time.Millisecond))
		if err := big.expectPending(ctx, s.cfg.BigBack); err != nil {
			return err
		}
		bb = &bigBacklog{in: big, tr: newTracker(s.cfg.BigBack)}
		s.keep["w4."+t.key] = bb
	}
	tr := bb.tr
	for run := range s.thisRun() {
		if t.name == "redis" {
			s.logf("   W4 redis, before the big drain: %s", s.redisMemory(ctx))
		}
		el, lat, err := storeDrain(ctx, bb.in.store, drainN, tr)
		if err != nil {
			return fmt.Errorf("big backlog run %d: %w", run+1, err)
		}
		ms := sortedMS(lat)
		c := tr.counts_()
		bigRate.add(rate(drainN, el), &c)
		bigP50.add(percentile(ms, 50), nil)
		bigP99.add(percentile(ms, 99), nil)
	}
	drained := drainN * (s.run + 1)
	if c := tr.counts_(); c.Delivered != drained || c.Duplicates > 0 || c.Foreign > 0 || c.OrderViolations > 0 {
		s.fail("outbox/%s W4 big backlog: count wrong: %+v, want %d delivered", t.name, c, drained)
	}
	if err := bb.in.expectPending(ctx, s.cfg.BigBack-drained); err != nil {
		s.fail("outbox/%s W4 big backlog: %v", t.name, err)
	}

	small := newMessages(drainN, 9)
	for run := range s.thisRun() {
		in, err := t.open(ctx, 1)
		if err != nil {
			return err
		}
		if _, err := in.fill(ctx, small, 1000); err != nil {
			in.close()
			return err
		}
		tr := newTracker(drainN)
		el, lat, err := storeDrain(ctx, in.store, drainN, tr)
		if err == nil {
			err = in.expectPending(ctx, 0)
		}
		in.close()
		if err != nil {
			return fmt.Errorf("small backlog run %d: %w", run+1, err)
		}
		c := tr.counts_()
		if err := c.check(false); err != nil {
			s.fail("outbox/%s W4 small backlog run %d: %v", t.name, run+1, err)
		}
		ms := sortedMS(lat)
		smallRate.add(rate(drainN, el), &c)
		smallP50.add(percentile(ms, 50), nil)
		smallP99.add(percentile(ms, 99), nil)
	}
	bigW, smallW := s.backlogTitle(title, true), s.backlogTitle(title, false)
	sys := "outbox/" + t.name + " store loop"
	s.record("ours."+t.key+".backlog.big.rate", bigW, sys, "entries/s", true, bigRate, "FindPendingBatch(500)+MarkSent")
	s.record("ours."+t.key+".backlog.big.p50", bigW, sys+" claim p50", "ms", false, bigP50, "")
	s.record("ours."+t.key+".backlog.big.p99", bigW, sys+" claim p99", "ms", false, bigP99, "")
	s.record("ours."+t.key+".backlog.small.rate", smallW, sys, "entries/s", true, smallRate, "FindPendingBatch(500)+MarkSent")
	s.record("ours."+t.key+".backlog.small.p50", smallW, sys+" claim p50", "ms", false, smallP50, "")
	s.record("ours."+t.key+".backlog.small.p99", smallW, sys+" claim p99", "ms", false, smallP99, "")
	return nil
}

func human(n int) string {
	switch {
	case n >= 1000000 && n%1000000 == 0:
		return fmt.Sprintf("%dM", n/1000000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

// storeDrain takes want entries off partition 0 with batches of 500 and
// returns the elapsed time and each FindPendingBatch's latency.
func storeDrain(ctx context.Context, store outbox.Store, want int, tr *tracker) (time.Duration, []time.Duration, error) {
	lease, err := store.AcquireLease(ctx, 0, "bench-w4", time.Minute)
	if err != nil {
		return 0, nil, err
	}
	defer store.ReleaseLease(context.WithoutCancel(ctx), lease)
	var lat []time.Duration
	got := 0
	start := time.Now()
	for got < want {
		t0 := time.Now()
		batch, err := store.FindPendingBatch(ctx, lease, min(500, want-got))
		lat = append(lat, time.Since(t0))
		if err != nil {
			return 0, nil, err
		}
		if len(batch) == 0 {
			return 0, nil, fmt.Errorf("count wrong: the backlog ran dry after %d of %d entries", got, want)
		}
		ids := make([]string, len(batch))
		for i, e := range batch {
			ids[i] = e.ID
			tr.markOrdered(e.Key, e.Payload)
		}
		if err := store.MarkSent(ctx, lease, ids); err != nil {
			return 0, nil, err
		}
		got += len(batch)
	}
	return time.Since(start), lat, nil
}

// w5: 1 relay vs 4 relays over 4 partitions: aggregate rate, duplicates
// and per-key order violations.
func (s *Suite) w5(ctx context.Context, t target) error {
	n := s.cfg.N
	msgs := newMessages(n, 10)
	title := t.title
	for _, relays := range []int{1, 4} {
		sr, steady := s.sr(fmt.Sprintf("%s.relays.%d", t.key, relays)), s.sr(fmt.Sprintf("%s.relays.%d.steady", t.key, relays))
		for run := range s.thisRun() {
			in, err := t.open(ctx, 4)
			if err != nil {
				return err
			}
			// Each append goes to one partition: entries of one call in
			// one key keep Redis Cluster-style single-slot transactions.
			if _, err := in.fill(ctx, msgs, 1000); err != nil {
				in.close()
				return err
			}
			tr := newTracker(n)
			// The relays share the partitions through the store's
			// Membership; no MaxPartitions is needed.
			el, err := s.drainRelay(ctx, in.store, countSink{tr}, tr, relays, func(i int, o *outbox.RelayOptions) {
				o.Owner = fmt.Sprintf("bench-relay-%d", i)
				o.AcquireInterval = 100 * time.Millisecond
			})
			c := tr.counts_()
			if err == nil {
				err = c.check(true) // duplicates are reported; loss and order violations fail
			}
			if err == nil {
				err = in.expectPending(ctx, 0)
			}
			in.close()
			if err != nil {
				s.fail("outbox/%s W5 %d relays run %d: %v", t.name, relays, run+1, err)
			}
			sr.add(rate(n, el), &c)
			steady.add(rate(n, tr.span()), nil)
		}
		w := fmt.Sprintf("%s, %d relay(s) on 4 partitions", title, relays)
		s.record(fmt.Sprintf("ours.%s.relays.%d", t.key, relays), w, "outbox/"+t.name+" relays", "entries/s", true, sr, "from Start, lease acquisition included")
		s.record(fmt.Sprintf("ours.%s.relays.%d.steady", t.key, relays), w, "outbox/"+t.name+" relays", "entries/s", true, steady, "first to last delivery")
	}
	return nil
}
