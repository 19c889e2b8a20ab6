package main

import (
	"context"
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
	return inboxTarget[pgx.Tx]{name: "postgres", key: "pg", title: "Postgres", store: "pginbox", effect: "INSERT", plain: "pgx BEGIN+INSERT+COMMIT",
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
				plain: txPlain(func(ctx context.Context, fn func(context.Context, pgx.Tx) error) error {
					return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return fn(ctx, tx) })
				}, pgInsertEffect),
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
