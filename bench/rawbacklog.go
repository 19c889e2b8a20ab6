package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
)

// W4 on the raw limits: the raw claim-and-delete loops of W2, one client,
// 500 per statement or call, draining SmallBack entries per round off a
// BigBack backlog (filled once, kept across rounds) and off a fresh
// SmallBack backlog. Their big/small ratio is the floor our own W4 ratio
// is judged against.

// The raw W4 tables live in their own schemas, so W1/W2's raw runs (which
// recreate bench_raw every round) never touch the kept big backlog.
const (
	schemaRawBig   = "bench_raw_w4big"
	schemaRawSmall = "bench_raw_w4small"
)

// The raw W4 Redis keys: their own hash tags in the {rawbench… family
// (deleted at the end by the "{rawbench*" pattern), so raw/redis's
// per-round "{rawbench}*" cleanup leaves the kept big backlog alone.
var (
	rawBigKeys   = []string{"{rawbench-w4big}:entries", "{rawbench-w4big}:pending"}
	rawSmallKeys = []string{"{rawbench-w4small}:entries", "{rawbench-w4small}:pending"}
)

// rawOn returns one of the raw statements (rawTableDDL, rawInsertMany,
// rawClaimDelete) on another table than bench_raw.entries.
func rawOn(q, table string) string {
	return strings.ReplaceAll(q, schemaRaw+".entries", table)
}

// rawBacklog is a raw W4 big backlog, kept across rounds.
type rawBacklog struct{ tr *tracker }

// rawBacklogOps is one raw limit's part of W4; big selects the kept big
// backlog or the fresh small one.
type rawBacklogOps struct {
	name, key, title string // "raw/postgres", "pg", "Postgres"
	sys, note        string // how the figures are labelled
	seed             uint64 // messages: seed for the big backlog, seed+1 for the small one
	// reset empties a backlog; fill appends m to it; drain takes exactly
	// want entries off it; left checks that it holds want entries.
	reset func(ctx context.Context, big bool) error
	fill  func(ctx context.Context, big bool, m *messages) (time.Duration, error)
	drain func(ctx context.Context, big bool, want int, tr *tracker) (time.Duration, error)
	left  func(ctx context.Context, big bool, want int) error
}

// rawBacklogW4 runs W4 on one raw limit: each round drains SmallBack
// entries off the big backlog (filled on first use, kept across rounds)
// and all of a fresh SmallBack backlog, counting what arrives.
func (s *Suite) rawBacklogW4(ctx context.Context, o rawBacklogOps) error {
	drainN := s.cfg.SmallBack
	bigRate, smallRate := s.sr("raw."+o.key+".backlog.big.rate"), s.sr("raw."+o.key+".backlog.small.rate")

	bb, _ := s.keep["w4.raw."+o.key].(*rawBacklog)
	if bb == nil {
		if err := o.reset(ctx, true); err != nil {
			return err
		}
		el, err := o.fill(ctx, true, newMessages(s.cfg.BigBack, o.seed))
		if err != nil {
			return fmt.Errorf("filling %d: %w", s.cfg.BigBack, err)
		}
		s.logf("   W4: filled the %s big backlog (%d entries) in %s", o.name, s.cfg.BigBack, el.Round(time.Millisecond))
		bb = &rawBacklog{tr: newTracker(s.cfg.BigBack)}
		s.keep["w4.raw."+o.key] = bb
	}
	for run := range s.thisRun() {
		el, err := o.drain(ctx, true, drainN, bb.tr)
		if err != nil {
			return fmt.Errorf("big backlog run %d: %w", run+1, err)
		}
		c := bb.tr.counts_()
		bigRate.add(rate(drainN, el), &c)
	}
	drained := drainN * (s.run + 1)
	if c := bb.tr.counts_(); c.Delivered != drained || c.Duplicates > 0 || c.Foreign > 0 {
		s.fail("%s W4 big backlog: count wrong: %+v, want %d delivered", o.name, c, drained)
	}
	if err := o.left(ctx, true, s.cfg.BigBack-drained); err != nil {
		s.fail("%s W4 big backlog: %v", o.name, err)
	}

	small := newMessages(drainN, o.seed+1)
	for run := range s.thisRun() {
		if err := o.reset(ctx, false); err != nil {
			return err
		}
		if _, err := o.fill(ctx, false, small); err != nil {
			return fmt.Errorf("small backlog run %d: filling: %w", run+1, err)
		}
		tr := newTracker(drainN)
		el, err := o.drain(ctx, false, drainN, tr)
		if err == nil {
			err = o.left(ctx, false, 0)
		}
		if err != nil {
			return fmt.Errorf("small backlog run %d: %w", run+1, err)
		}
		c := tr.counts_()
		if err := c.check(false); err != nil {
			s.fail("%s W4 small backlog run %d: %v", o.name, run+1, err)
		}
		smallRate.add(rate(drainN, el), &c)
	}
	s.record("raw."+o.key+".backlog.big.rate", s.backlogTitle(o.title, true), o.sys, "entries/s", true, bigRate, o.note)
	s.record("raw."+o.key+".backlog.small.rate", s.backlogTitle(o.title, false), o.sys, "entries/s", true, smallRate, o.note)
	return nil
}

// rawPostgresBacklog is W4 on raw Postgres.
func (s *Suite) rawPostgresBacklog(ctx context.Context) error {
	table := func(big bool) string {
		if big {
			return schemaRawBig + ".entries"
		}
		return schemaRawSmall + ".entries"
	}
	err := s.rawBacklogW4(ctx, rawBacklogOps{
		name: "raw/postgres", key: "pg", title: "Postgres",
		sys: "raw SQL claim-and-delete loop", note: "500/stmt, 1 client", seed: 11,
		reset: func(ctx context.Context, big bool) error {
			schema := map[bool]string{true: schemaRawBig, false: schemaRawSmall}[big]
			return s.recreateSchema(ctx, schema, rawOn(rawTableDDL, table(big)))
		},
		fill: func(ctx context.Context, big bool, m *messages) (time.Duration, error) {
			return s.fillRawPG(ctx, table(big), m)
		},
		drain: func(ctx context.Context, big bool, want int, tr *tracker) (time.Duration, error) {
			return s.rawPGDrain(ctx, table(big), want, tr)
		},
		left: func(ctx context.Context, big bool, want int) error { return s.checkRawRows(ctx, table(big), want) },
	})
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schemaRawSmall+" CASCADE")
	return err
}

// rawRedisBacklog is W4 on raw Redis.
func (s *Suite) rawRedisBacklog(ctx context.Context) error {
	for _, sc := range []*redis.Script{rawAppendScript, rawClaimScript} {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return err
		}
	}
	keys := func(big bool) []string {
		if big {
			return rawBigKeys
		}
		return rawSmallKeys
	}
	return s.rawBacklogW4(ctx, rawBacklogOps{
		name: "raw/redis", key: "redis", title: "Redis",
		sys: "raw claim-and-delete script loop", note: "500/call, 1 client", seed: 13,
		reset: func(ctx context.Context, big bool) error { return s.rdb.Unlink(ctx, keys(big)...).Err() },
		fill: func(ctx context.Context, big bool, m *messages) (time.Duration, error) {
			return s.fillRawRedis(ctx, keys(big), m)
		},
		drain: func(ctx context.Context, big bool, want int, tr *tracker) (time.Duration, error) {
			return s.rawRedisDrain(ctx, keys(big), want, tr)
		},
		left: func(ctx context.Context, big bool, want int) error { return s.checkRawRedis(ctx, keys(big), want) },
	})
}

// fillRawPG inserts the messages into table, 1,000 rows per multi-row
// INSERT, with 8 callers, checks the row count and ANALYZEs the table
// (untimed). Without statistics the planner answers the claim with a
// bitmap scan and a sort of the whole backlog per statement, so the
// floor would depend on whether autovacuum had analyzed the table yet.
func (s *Suite) fillRawPG(ctx context.Context, table string, m *messages) (time.Duration, error) {
	q := rawOn(rawInsertMany, table)
	n := len(m.payload)
	el, err := parallel(ctx, Callers, n, 1000, func(ctx context.Context, lo, hi int) error {
		ids := make([]string, hi-lo)
		for i := range ids {
			ids[i] = outbox.NewID()
		}
		_, err := s.pool.Exec(ctx, q, ids, m.keys[lo:hi], m.payload[lo:hi])
		return err
	})
	if err != nil {
		return el, err
	}
	if err := s.checkRawRows(ctx, table, n); err != nil {
		return el, err
	}
	return el, s.analyze(ctx, table)
}

// rawPGDrain takes exactly want rows off table with the raw
// claim-and-delete statement (500 per statement, one client) and returns
// the elapsed time.
func (s *Suite) rawPGDrain(ctx context.Context, table string, want int, tr *tracker) (time.Duration, error) {
	q := rawOn(rawClaimDelete, table)
	got := 0
	start := time.Now()
	for got < want {
		rows, err := s.pool.Query(ctx, q, min(500, want-got))
		if err != nil {
			return 0, fmt.Errorf("raw claim-and-delete: %w", err)
		}
		k := 0
		for rows.Next() {
			var id, key string
			var p []byte
			if err := rows.Scan(&id, &key, &p); err != nil {
				rows.Close()
				return 0, err
			}
			tr.markPayload(p)
			k++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return 0, fmt.Errorf("raw claim-and-delete: %w", err)
		}
		if k == 0 {
			return 0, fmt.Errorf("count wrong: the backlog ran dry after %d of %d rows", got, want)
		}
		got += k
	}
	return time.Since(start), nil
}

// fillRawRedis appends the messages with the raw append script, 1,000
// calls per pipeline, with 8 callers, and checks the counts.
func (s *Suite) fillRawRedis(ctx context.Context, keys []string, m *messages) (time.Duration, error) {
	n := len(m.payload)
	el, err := parallel(ctx, Callers, n, 1000, func(ctx context.Context, lo, hi int) error {
		pipe := s.rdb.Pipeline()
		for i := lo; i < hi; i++ {
			pipe.EvalSha(ctx, rawAppendScript.Hash(), keys, outbox.NewID(), m.payload[i])
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		return el, err
	}
	return el, s.checkRawRedis(ctx, keys, n)
}

// rawRedisDrain takes exactly want entries off keys with the raw
// claim-and-delete script (500 per call, one client) and returns the
// elapsed time.
func (s *Suite) rawRedisDrain(ctx context.Context, keys []string, want int, tr *tracker) (time.Duration, error) {
	got := 0
	start := time.Now()
	for got < want {
		vals, err := s.rdb.EvalSha(ctx, rawClaimScript.Hash(), keys, min(500, want-got)).Slice()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, fmt.Errorf("raw claim-and-delete: %w", err)
		}
		if len(vals) == 0 {
			return 0, fmt.Errorf("count wrong: the backlog ran dry after %d of %d entries", got, want)
		}
		for _, v := range vals {
			str, _ := v.(string)
			tr.markPayload([]byte(str))
		}
		got += len(vals)
	}
	return time.Since(start), nil
}

// backlogTitle names a W4 workload as ours does: "Postgres backlog 1M
// pending, drain 10k" and "Postgres backlog 10k pending, drain all".
func (s *Suite) backlogTitle(backend string, big bool) string {
	if big {
		return fmt.Sprintf("%s backlog %s pending, drain %s", backend, human(s.cfg.BigBack), human(s.cfg.SmallBack))
	}
	return fmt.Sprintf("%s backlog %s pending, drain all", backend, human(s.cfg.SmallBack))
}
