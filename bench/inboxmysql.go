package main

import (
	"context"
	"database/sql"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
)

// inboxMySQLTable is the table name of mysqlinbox's tables in
// mysqlBenchDB ("bench_inbox", "bench_inbox_keyseq", ...); the effect
// table is inboxMySQLEffects.
const (
	inboxMySQLTable   = "bench_inbox"
	inboxMySQLEffects = "bench_inbox_effects"
)

const inboxMySQLEffectsDDL = "CREATE TABLE " + inboxMySQLEffects + ` (
	ord bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
	seq int NOT NULL,
	` + "`key`" + ` varchar(64) NOT NULL,
	key_seq int NOT NULL,
	body varbinary(512) NOT NULL
) ENGINE=InnoDB`

// mysqlInboxTarget is mysqlinbox's Store[*sql.Tx] on the MySQL workloads'
// database and pool, against the same INSERT in a transaction of that
// pool. It is nil when MySQL cannot be reached and the run does not
// require it.
func (s *Suite) mysqlInboxTarget(ctx context.Context) (*inboxTarget[*sql.Tx], error) {
	c, err := s.mysql(ctx)
	if err != nil || c == nil {
		return nil, err
	}
	return &inboxTarget[*sql.Tx]{name: "mysql", key: "my", title: "MySQL", store: "mysqlinbox", effect: "INSERT", plain: "database/sql BEGIN+INSERT+COMMIT",
		open: func(ctx context.Context) (*inboxSide[*sql.Tx], error) {
			opts := mysqlinbox.Options{Table: inboxMySQLTable}
			drop := func(ctx context.Context) error {
				if err := mysqlinbox.MigrateDown(ctx, c.db, opts); err != nil {
					return err
				}
				_, err := c.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+inboxMySQLEffects)
				return err
			}
			if err := drop(ctx); err != nil {
				return nil, err
			}
			if _, err := c.db.ExecContext(ctx, inboxMySQLEffectsDDL); err != nil {
				return nil, err
			}
			if err := mysqlinbox.Migrate(ctx, c.db, opts); err != nil {
				return nil, err
			}
			store, err := mysqlinbox.New(c.db, opts)
			if err != nil {
				return nil, err
			}
			return &inboxSide[*sql.Tx]{
				store:  store,
				effect: mysqlInsertEffect,
				plain: txPlain(func(ctx context.Context, fn func(context.Context, *sql.Tx) error) error {
					tx, err := c.db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					if err := fn(ctx, tx); err != nil {
						_ = tx.Rollback()
						return err
					}
					return tx.Commit()
				}, mysqlInsertEffect),
				counts: func(ctx context.Context, n int) (Counts, error) { return mysqlEffectCounts(ctx, c.db, n) },
				close: func() {
					store.Close()
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					if err := drop(ctx); err != nil {
						s.logf("cleanup: dropping the MySQL inbox tables: %v", err)
					}
				},
			}, nil
		}}, nil
}

// mysqlInsertEffect inserts rec's effect row.
func mysqlInsertEffect(ctx context.Context, tx *sql.Tx, rec *kgo.Record) error {
	seq, keySeq, err := parsePayload(rec.Value)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO "+inboxMySQLEffects+" (seq, `key`, key_seq, body) VALUES (?, ?, ?, ?)", seq, string(rec.Key), keySeq, rec.Value)
	return err
}

// mysqlEffectCounts reads the effect table back.
func mysqlEffectCounts(ctx context.Context, db *sql.DB, n int) (Counts, error) {
	c := Counts{Expected: n}
	var rows int
	err := db.QueryRowContext(ctx, `SELECT COALESCE(SUM(seq >= 0 AND seq < ?), 0),
		COUNT(DISTINCT CASE WHEN seq >= 0 AND seq < ? THEN seq END),
		COALESCE(SUM(seq < 0 OR seq >= ?), 0) FROM `+inboxMySQLEffects, n, n, n).Scan(&rows, &c.Delivered, &c.Foreign)
	if err != nil {
		return c, err
	}
	c.Duplicates = rows - c.Delivered
	err = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT key_seq < LAG(key_seq) OVER (PARTITION BY `key` ORDER BY ord) AS behind FROM "+
		inboxMySQLEffects+") t WHERE behind").Scan(&c.OrderViolations)
	return c, err
}
