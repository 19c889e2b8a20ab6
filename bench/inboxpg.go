package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
)

// schemaInbox is the schema of the Postgres inbox workloads: the effect
// table and pginbox's tables, made afresh for every consumer run.
const schemaInbox = "bench_inbox"

// inboxEffectsDDL is the effect table: one row per applied record, in the
// order the rows were inserted (ord).
const inboxEffectsDDL = `CREATE TABLE ` + schemaInbox + `.effects (
	ord bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	seq integer NOT NULL,
	key text NOT NULL,
	key_seq integer NOT NULL,
	body bytea NOT NULL
);`

// pgInboxTarget is pginbox's Store[pgx.Tx] over the suite's pool, against
// the same INSERT in a pgx transaction of that pool.
func (s *Suite) pgInboxTarget() inboxTarget[pgx.Tx] {
	return inboxTarget[pgx.Tx]{name: "postgres", key: "pg", title: "Postgres", store: "pginbox", plain: "pgx BEGIN+INSERT+COMMIT",
		open: func(ctx context.Context) (*inboxSide[pgx.Tx], error) {
			if err := s.recreateSchema(ctx, schemaInbox, inboxEffectsDDL); err != nil {
				return nil, err
			}
			opts := pginbox.Options{Schema: schemaInbox}
			if err := pginbox.Migrate(ctx, s.pool, opts); err != nil {
				return nil, err
			}
			store, err := pginbox.New(s.pool, opts)
			if err != nil {
				return nil, err
			}
			return &inboxSide[pgx.Tx]{
				store:  store,
				effect: pgInsertEffect,
				plainTx: func(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
					return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return fn(ctx, tx) })
				},
				counts: s.pgEffectCounts,
				close: func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					if _, err := s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schemaInbox+" CASCADE"); err != nil {
						s.logf("cleanup: dropping schema %s: %v", schemaInbox, err)
					}
				},
			}, nil
		}}
}

// pgInsertEffect inserts rec's effect row.
func pgInsertEffect(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
	seq, keySeq, err := parsePayload(rec.Value)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+schemaInbox+".effects (seq, key, key_seq, body) VALUES ($1, $2, $3, $4)", seq, string(rec.Key), keySeq, rec.Value)
	return err
}

// pgEffectCounts reads the effect table back.
func (s *Suite) pgEffectCounts(ctx context.Context, n int) (Counts, error) {
	c := Counts{Expected: n}
	var rows int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE seq >= 0 AND seq < $1),
		count(DISTINCT seq) FILTER (WHERE seq >= 0 AND seq < $1),
		count(*) FILTER (WHERE seq < 0 OR seq >= $1) FROM `+schemaInbox+`.effects`, n).Scan(&rows, &c.Delivered, &c.Foreign)
	if err != nil {
		return c, err
	}
	c.Duplicates = rows - c.Delivered
	err = s.pool.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT key_seq < lag(key_seq) OVER (PARTITION BY key ORDER BY ord) AS behind FROM `+schemaInbox+`.effects) t WHERE behind`).Scan(&c.OrderViolations)
	return c, err
}

// inboxWorkload runs one round of the inbox workloads.
func (s *Suite) inboxWorkload(ctx context.Context) error {
	var errs []error
	step := func(sub string, fn func() error) {
		if ctx.Err() != nil || !s.inboxSubSelected(sub) {
			return
		}
		t0 := time.Now()
		if err := fn(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sub, err))
			s.fail("inbox %s: %v", sub, err)
		}
		s.logf("   inbox %s took %s", sub, time.Since(t0).Round(100*time.Millisecond))
	}
	pg := s.pgInboxTarget()
	subs := inboxSubs(pg.name)
	step(subs[0], func() error { return inboxCost(ctx, s, pg, 1) })
	step(subs[1], func() error { return inboxCost(ctx, s, pg, inboxBatch) })
	step(subs[2], func() error { return inboxGroups(ctx, s, pg) })
	return errors.Join(errs...)
}

// inboxComparisons are the inbox rows of the targets table (issue 31):
// per record, the consumer with the inbox at least 0.77× the plain one
// (a cost of at most 1.3×), and close to 1× with 100 records per
// transaction (0.9×); the group's rates have no target.
func inboxComparisons() []comparison {
	var cs []comparison
	for _, t := range []struct{ key, title string }{{"pg", "Postgres"}} {
		cs = append(cs,
			comparison{group: t.title + " inbox, 1 record/tx, 1 consumer from kfake: with the inbox vs the same plain INSERT (cost ≤ 1.3×)", ours: "inbox." + t.key + ".rec1.inbox", other: "inbox." + t.key + ".rec1.plain", target: 0.77},
			comparison{group: t.title + " inbox, 1 record/tx, 1 consumer from kfake: the inbox with IDs only (no key order, no offsets) vs the same plain INSERT", ours: "inbox." + t.key + ".rec1.id", other: "inbox." + t.key + ".rec1.plain"},
			comparison{group: fmt.Sprintf("%s inbox, %d records/tx, 1 consumer from kfake: with the inbox vs the same plain INSERTs", t.title, inboxBatch), ours: fmt.Sprintf("inbox.%s.rec%d.inbox", t.key, inboxBatch), other: fmt.Sprintf("inbox.%s.rec%d.plain", t.key, inboxBatch), target: 0.9},
			comparison{group: fmt.Sprintf("%s inbox, kafkainbox consumer group of %d on %d partitions, from Run", t.title, inboxGroupSize, inboxPartitions), ours: fmt.Sprintf("inbox.%s.group%d", t.key, inboxGroupSize)},
			comparison{group: fmt.Sprintf("%s inbox, kafkainbox consumer group of %d vs 1 on %d partitions, first record to last commit", t.title, inboxGroupSize, inboxPartitions), ours: fmt.Sprintf("inbox.%s.group%d.steady", t.key, inboxGroupSize), other: fmt.Sprintf("inbox.%s.group1.steady", t.key)},
		)
	}
	return cs
}
