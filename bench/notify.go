package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// Notifications under many callers (issue 32, item 6). A NOTIFY makes
// PostgreSQL commit notifying transactions one at a time; the workload
// measures what that costs the appends as the callers grow, for each way
// the Postgres backend can notify, and what each way gives the latency at
// half load.
//
//   - Appends: notifyCallers concurrent callers, each committing its own
//     transaction with one entry, N1 transactions per figure, for every
//     setting of notifySettings and for the raw BEGIN+INSERT+COMMIT, each
//     caller count on a pool of its own.
//   - Latency: the commit-to-sink p99 of W3 (32 key-affine callers, one
//     relay, the no-op sink) at half of the Postgres sustainable rate of
//     the round, the same arrivals for every setting.

// notifyWorkloadName is the workload's name, which -only and -skip match.
const notifyWorkloadName = "postgres notify callers"

// notifyCallers are the caller counts of the append figures.
var notifyCallers = []int{8, 32, 128}

// notifyJudgedCallers is the caller count whose cost of notifications is
// judged against notifyMaxCost.
const notifyJudgedCallers = 32

// notifyMaxCost is the share of the append throughput the default
// notifications may cost at notifyJudgedCallers (issue 32: 20%), and
// notifyMaxP99 the factor by which a cheaper setting's p99 at half load
// may exceed the default's.
const (
	notifyMaxCost = 0.2
	notifyMaxP99  = 2.0
)

// notifyConnsHeadroom is the number of the server's connection slots the
// workload leaves to everything else (the suite's pool, the relay's, the
// other clients of the server) when it sizes a caller pool.
const notifyConnsHeadroom = 16

// notifySetting is one way the Postgres backend notifies.
type notifySetting struct {
	key   string // in the figures' keys
	label string // in the figures' system column
	set   func(*pgoutbox.Options)
}

// notifySettings are the ways measured: the default, a NOTIFY in every
// transaction (the behaviour before NotifyInterval), two longer
// intervals, and none. The first is the default; the last is NoNotify.
var notifySettings = []notifySetting{
	{"default", fmt.Sprintf("default (in-transaction NOTIFY at most every %s, the rest trailed)", pgoutbox.DefaultNotifyInterval), nil},
	{"every", "NotifyInterval < 0 (NOTIFY in every transaction)", func(o *pgoutbox.Options) { o.NotifyInterval = -1 }},
	{"10ms", "NotifyInterval 10ms", func(o *pgoutbox.Options) { o.NotifyInterval = 10 * time.Millisecond }},
	{"50ms", "NotifyInterval 50ms", func(o *pgoutbox.Options) { o.NotifyInterval = 50 * time.Millisecond }},
	{"quiet", "NoNotify (the relay polls, PollInterval default)", func(o *pgoutbox.Options) { o.NoNotify = true }},
}

// notifyAppendKey is the key of the append figure of setting (or "raw")
// at callers.
func notifyAppendKey(setting string, callers int) string {
	if setting == "raw" {
		return fmt.Sprintf("raw.pg.notify.c%d", callers)
	}
	return fmt.Sprintf("ours.pg.notify.%s.c%d", setting, callers)
}

// notifyLatPrefix is the key prefix of the latency figures of setting.
func notifyLatPrefix(setting string) string { return "ours.pg.notify." + setting + ".lat" }

func notifyAppendTitle(callers int) string {
	return fmt.Sprintf("Postgres append, 1 entry/tx, %d callers", callers)
}

// notifyWorkload runs the workload for one round. A caller count whose
// appends fail is reported as a failure of the run and the workload goes
// on with the next, and then with the latency.
func (s *Suite) notifyWorkload(ctx context.Context) error {
	n1 := s.cfg.N1
	msgs := newMessages(n1, 21)
	for _, callers := range notifyCallers {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		pool, conns, err := s.callerPool(ctx, callers)
		if err == nil {
			err = s.notifyAppends(ctx, pool, callers, conns, msgs)
			pool.Close()
		}
		if err != nil {
			s.fail("%s: %d callers, run %d: %v", notifyWorkloadName, callers, s.run+1, err)
		}
	}
	return s.notifyLatency(ctx)
}

// callerPool opens a pool for callers concurrent callers: one connection
// each, as far as the server's max_connections allows after
// notifyConnsHeadroom and the connections open now.
func (s *Suite) callerPool(ctx context.Context, callers int) (*pgxpool.Pool, int, error) {
	var maxConns, used int
	if err := s.pool.QueryRow(ctx, "SELECT current_setting('max_connections')::int, (SELECT count(*) FROM pg_stat_activity)::int").Scan(&maxConns, &used); err != nil {
		return nil, 0, err
	}
	conns := min(callers, maxConns-used-notifyConnsHeadroom)
	if conns < min(callers, 8) {
		return nil, 0, fmt.Errorf("postgres: %d of max_connections %d are in use, too few left for %d callers; close other clients or raise max_connections", used, maxConns, callers)
	}
	cfg := s.pool.Config().Copy()
	cfg.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, 0, err
	}
	return pool, conns, nil
}

// notifyAppends measures the appends of callers callers on pool (conns
// connections): the raw transaction, then each setting, in one round. A
// setting that fails is left out of the round's figures and its error
// returned with the others' after the remaining settings ran.
func (s *Suite) notifyAppends(ctx context.Context, pool *pgxpool.Pool, callers, conns int, msgs *messages) error {
	n1 := len(msgs.keys)
	note := fmt.Sprintf("%d callers on %d connections", callers, conns)
	if conns < callers {
		note += " (the server's max_connections leaves no more)"
	}
	raw := s.sr(notifyAppendKey("raw", callers))
	if err := s.resetRawPG(ctx); err != nil {
		return err
	}
	el, err := parallel(ctx, callers, n1, 1, func(ctx context.Context, lo, hi int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, rawInsert, outbox.NewID(), msgs.keys[lo], msgs.payload[lo])
			return err
		})
	})
	if err == nil {
		err = s.checkRawRows(ctx, schemaRaw+".entries", n1)
	}
	if err != nil {
		return fmt.Errorf("raw insert 1/tx, %d callers: %w", callers, err)
	}
	raw.add(rate(n1, el), nil)
	s.record(notifyAppendKey("raw", callers), notifyAppendTitle(callers), "raw pgx BEGIN+INSERT+COMMIT", "entries/s", true, raw, note)
	var errs []error
	for _, st := range notifySettings {
		sr := s.sr(notifyAppendKey(st.key, callers))
		v, err := s.notifyAppendRun(ctx, pool, st, callers, msgs)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", st.key, err))
			continue
		}
		sr.add(v, nil)
		s.record(notifyAppendKey(st.key, callers), notifyAppendTitle(callers), "outbox/postgres AppendInTx, "+st.label, "entries/s", true, sr, note)
	}
	return errors.Join(errs...)
}

// notifyAppendRun appends msgs, one per transaction, by callers callers
// on pool into a fresh outbox with setting st, checks that every entry is
// pending and returns the entries per second.
func (s *Suite) notifyAppendRun(ctx context.Context, pool *pgxpool.Pool, st notifySetting, callers int, msgs *messages) (float64, error) {
	in, err := s.postgresTargetWith(st.set).open(ctx, 1)
	if err != nil {
		return 0, err
	}
	defer in.close()
	b, ok := in.store.(*pgoutbox.Backend)
	if !ok {
		return 0, fmt.Errorf("the Postgres target's store is a %T, not a *pgoutbox.Backend", in.store)
	}
	n := len(msgs.keys)
	el, err := parallel(ctx, callers, n, 1, func(ctx context.Context, lo, hi int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return b.AppendInTx(ctx, tx, outbox.Entry{Topic: benchTopic, Key: msgs.keys[lo], Payload: msgs.payload[lo]})
		})
	})
	if err != nil {
		return 0, err
	}
	if err := in.expectPending(ctx, n); err != nil {
		return 0, err
	}
	return rate(n, el), nil
}

// roundPGRate returns the Postgres sustainable end-to-end rate of this
// round: W3's when it ran in this round, else it searches for it (and
// keeps it for the workloads after).
func (s *Suite) roundPGRate(ctx context.Context) (float64, error) {
	t := s.postgresTarget()
	s.mu.Lock()
	rr, ok := s.latRate[t.key]
	s.mu.Unlock()
	if ok && rr.run == s.run {
		return rr.rate, nil
	}
	s.logf("   no Postgres sustainable rate measured in this round: searching for it")
	r, c, err := s.sustainableRate(ctx, t, s.noopCarrier, t.name, searchUpTo)
	if err != nil {
		return 0, fmt.Errorf("sustainable rate: %w", err)
	}
	if err := c.check(false); err != nil {
		return 0, fmt.Errorf("sustainable rate: %w", err)
	}
	s.mu.Lock()
	s.latRate[t.key] = roundRate{run: s.run, rate: r}
	s.mu.Unlock()
	return r, nil
}

// notifyLatency measures the commit-to-sink latency at half of the
// round's Postgres sustainable rate with each setting, the same arrivals
// for each.
func (s *Suite) notifyLatency(ctx context.Context) error {
	r, err := s.roundPGRate(ctx)
	if err != nil {
		return err
	}
	arr := r / 2
	n := min(s.cfg.LatencyN, int(arr*s.cfg.LatencyD.Seconds()))
	for _, st := range notifySettings {
		prefix := notifyLatPrefix(st.key)
		asked, got, perTx := s.sr(prefix+".asked"), s.sr(prefix+".rate"), s.sr(prefix+".pertx")
		p50, p99, pmax, busy := s.sr(prefix+".p50"), s.sr(prefix+".p99"), s.sr(prefix+".max"), s.sr(prefix+".busy")
		t := s.postgresTargetWith(st.set)
		in, err := t.open(ctx, 1)
		if err != nil {
			return err
		}
		res, err := s.latencyRun(ctx, t, in, in.store, s.noopCarrier, n, arr, s.cfg.LatencyD)
		in.close()
		if err != nil {
			s.fail("%s: latency with %s, run %d: %v", notifyWorkloadName, st.key, s.run+1, err)
			continue
		}
		res.add(arr, asked, got, perTx, p50, p99, pmax, busy)
		w := fmt.Sprintf("Postgres commit-to-sink, %.0f/s (half of the sustainable rate), notifications: %s", asked.median(), st.key)
		recordLatency(s, prefix, w, "outbox/postgres, "+st.label, fmt.Sprintf("at most %d entries or %s per run", n, s.cfg.LatencyD), asked, got, perTx, p50, p99, pmax, busy)
	}
	return nil
}

// notifyComparisons are the targets-table rows of the workload: per caller
// count, each setting's appends against NoNotify's and NoNotify's against
// the raw transaction (the default's judged at notifyJudgedCallers: it may
// cost at most notifyMaxCost); and each setting's p99 at half load against
// the default's (at most notifyMaxP99 times it).
func notifyComparisons() []comparison {
	var cs []comparison
	for _, c := range notifyCallers {
		g := notifyAppendTitle(c)
		var target float64
		if c == notifyJudgedCallers {
			target = 1 - notifyMaxCost
		}
		cs = append(cs, comparison{group: g + ": default notifications vs none (NoNotify)", ours: notifyAppendKey("default", c), other: notifyAppendKey("quiet", c), target: target})
		for _, st := range notifySettings[1 : len(notifySettings)-1] {
			cs = append(cs, comparison{group: g + ": " + st.label + " vs none", ours: notifyAppendKey(st.key, c), other: notifyAppendKey("quiet", c)})
		}
		cs = append(cs, comparison{group: g + ", NoNotify, vs the raw transaction", ours: notifyAppendKey("quiet", c), other: notifyAppendKey("raw", c)})
	}
	const g = "Postgres commit-to-sink p99, half of the sustainable rate"
	cs = append(cs, comparison{group: g + ", default notifications", ours: notifyLatPrefix("default") + ".p99"})
	for _, st := range notifySettings[1:] {
		cs = append(cs, comparison{group: g + ": " + st.label + " vs the default", ours: notifyLatPrefix(st.key) + ".p99", other: notifyLatPrefix("default") + ".p99", atMost: notifyMaxP99})
	}
	return cs
}
