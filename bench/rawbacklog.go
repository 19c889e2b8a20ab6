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

// rawPostgresBacklog is W4 on raw Postgres.
func (s *Suite) rawPostgresBacklog(ctx context.Context) error {
	drainN := s.cfg.SmallBack
	bigT, smallT := schemaRawBig+".entries", schemaRawSmall+".entries"
	bigRate, smallRate := s.sr("raw.pg.backlog.big.rate"), s.sr("raw.pg.backlog.small.rate")

	bb, _ := s.keep["w4.raw.pg"].(*rawBacklog)
	if bb == nil {
		if err := s.recreateSchema(ctx, schemaRawBig, rawOn(rawTableDDL, bigT)); err != nil {
			return err
		}
		el, err := s.fillRawPG(ctx, bigT, newMessages(s.cfg.BigBack, 11))
		if err != nil {
			return fmt.Errorf("filling %d: %w", s.cfg.BigBack, err)
		}
		s.logf("   W4: inserted %d rows into %s in %s", s.cfg.BigBack, bigT, el.Round(time.Millisecond))
		bb = &rawBacklog{tr: newTracker(s.cfg.BigBack)}
		s.keep["w4.raw.pg"] = bb
	}
	for run := range s.thisRun() {
		el, err := s.rawPGDrain(ctx, bigT, drainN, bb.tr)
		if err != nil {
			return fmt.Errorf("big backlog run %d: %w", run+1, err)
		}
		c := bb.tr.counts_()
		bigRate.add(rate(drainN, el), &c)
	}
	drained := drainN * (s.run + 1)
	if c := bb.tr.counts_(); c.Delivered != drained || c.Duplicates > 0 || c.Foreign > 0 {
		s.fail("raw/postgres W4 big backlog: count wrong: %+v, want %d delivered", c, drained)
	}
	if err := s.checkRawRows(ctx, bigT, s.cfg.BigBack-drained); err != nil {
		s.fail("raw/postgres W4 big backlog: %v", err)
	}

	small := newMessages(drainN, 12)
	for run := range s.thisRun() {
		if err := s.recreateSchema(ctx, schemaRawSmall, rawOn(rawTableDDL, smallT)); err != nil {
			return err
		}
		if _, err := s.fillRawPG(ctx, smallT, small); err != nil {
			return fmt.Errorf("small backlog run %d: filling: %w", run+1, err)
		}
		tr := newTracker(drainN)
		el, err := s.rawPGDrain(ctx, smallT, drainN, tr)
		if err == nil {
			err = s.checkRawRows(ctx, smallT, 0)
		}
		if err != nil {
			return fmt.Errorf("small backlog run %d: %w", run+1, err)
		}
		c := tr.counts_()
		if err := c.check(false); err != nil {
			s.fail("raw/postgres W4 small backlog run %d: %v", run+1, err)
		}
		smallRate.add(rate(drainN, el), &c)
	}
	if _, err := s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schemaRawSmall+" CASCADE"); err != nil {
		return err
	}
	sys, note := "raw SQL claim-and-delete loop", "500/stmt, 1 client"
	s.record("raw.pg.backlog.big.rate", s.backlogTitle("Postgres", true), sys, "entries/s", true, bigRate, note)
	s.record("raw.pg.backlog.small.rate", s.backlogTitle("Postgres", false), sys, "entries/s", true, smallRate, note)
	return nil
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
	_, err = s.pool.Exec(ctx, "ANALYZE "+table)
	return el, err
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

// rawRedisBacklog is W4 on raw Redis.
func (s *Suite) rawRedisBacklog(ctx context.Context) error {
	drainN := s.cfg.SmallBack
	if err := rawAppendScript.Load(ctx, s.rdb).Err(); err != nil {
		return err
	}
	if err := rawClaimScript.Load(ctx, s.rdb).Err(); err != nil {
		return err
	}
	bigRate, smallRate := s.sr("raw.redis.backlog.big.rate"), s.sr("raw.redis.backlog.small.rate")

	bb, _ := s.keep["w4.raw.redis"].(*rawBacklog)
	if bb == nil {
		if err := s.rdb.Unlink(ctx, rawBigKeys...).Err(); err != nil {
			return err
		}
		el, err := s.fillRawRedis(ctx, rawBigKeys, newMessages(s.cfg.BigBack, 13))
		if err != nil {
			return fmt.Errorf("filling %d: %w", s.cfg.BigBack, err)
		}
		s.logf("   W4: appended %d entries to %s in %s", s.cfg.BigBack, rawBigKeys[0], el.Round(time.Millisecond))
		bb = &rawBacklog{tr: newTracker(s.cfg.BigBack)}
		s.keep["w4.raw.redis"] = bb
	}
	for run := range s.thisRun() {
		el, err := s.rawRedisDrain(ctx, rawBigKeys, drainN, bb.tr)
		if err != nil {
			return fmt.Errorf("big backlog run %d: %w", run+1, err)
		}
		c := bb.tr.counts_()
		bigRate.add(rate(drainN, el), &c)
	}
	drained := drainN * (s.run + 1)
	if c := bb.tr.counts_(); c.Delivered != drained || c.Duplicates > 0 || c.Foreign > 0 {
		s.fail("raw/redis W4 big backlog: count wrong: %+v, want %d delivered", c, drained)
	}
	if err := s.checkRawRedis(ctx, rawBigKeys, s.cfg.BigBack-drained); err != nil {
		s.fail("raw/redis W4 big backlog: %v", err)
	}

	small := newMessages(drainN, 14)
	for run := range s.thisRun() {
		if err := s.rdb.Unlink(ctx, rawSmallKeys...).Err(); err != nil {
			return err
		}
		if _, err := s.fillRawRedis(ctx, rawSmallKeys, small); err != nil {
			return fmt.Errorf("small backlog run %d: filling: %w", run+1, err)
		}
		tr := newTracker(drainN)
		el, err := s.rawRedisDrain(ctx, rawSmallKeys, drainN, tr)
		if err == nil {
			err = s.checkRawRedis(ctx, rawSmallKeys, 0)
		}
		if err != nil {
			return fmt.Errorf("small backlog run %d: %w", run+1, err)
		}
		c := tr.counts_()
		if err := c.check(false); err != nil {
			s.fail("raw/redis W4 small backlog run %d: %v", run+1, err)
		}
		smallRate.add(rate(drainN, el), &c)
	}
	sys, note := "raw claim-and-delete script loop", "500/call, 1 client"
	s.record("raw.redis.backlog.big.rate", s.backlogTitle("Redis", true), sys, "entries/s", true, bigRate, note)
	s.record("raw.redis.backlog.small.rate", s.backlogTitle("Redis", false), sys, "entries/s", true, smallRate, note)
	return nil
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
