package appender

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/internal/mysqlurl"
)

// mysqlStore appends with db.BeginTx, AppendInTx, tx.Commit.
type mysqlStore struct {
	db      *sql.DB
	b       *mysqloutbox.Backend
	timeout time.Duration
}

func openMySQL(ctx context.Context, cfg config, log *slog.Logger) (store, error) {
	dsn, err := mysqlurl.DSN(cfg.store)
	if err != nil {
		return nil, fmt.Errorf("appender: -store: %w", err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, fmt.Errorf("appender: -store %s: %v", redact(cfg.store), err)
	}
	db.SetMaxOpenConns(cfg.workers + 1)
	db.SetMaxIdleConns(cfg.workers + 1)
	octx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	b, err := mysqloutbox.New(octx, db, mysqloutbox.Options{Table: cfg.table, Logger: log, KeySequence: cfg.keySequence})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("appender: opening the outbox %s at %s: %w", cfg.table, redact(cfg.store), err)
	}
	return &mysqlStore{db: db, b: b, timeout: cfg.timeout}, nil
}

func (s *mysqlStore) partitions() int { return s.b.Partitions() }

func (s *mysqlStore) close() {
	_ = s.b.Close()
	_ = s.db.Close()
}

func (s *mysqlStore) appendOne(ctx context.Context, e outbox.Entry, intent func() error) error {
	actx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	// database/sql rolls a transaction back when the context of BeginTx
	// ends: the transaction's context is not ctx, so a graceful stop
	// waits for a commit in flight instead of leaving it unknown.
	tctx, tcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*s.timeout)
	defer tcancel()
	tx, err := s.db.BeginTx(tctx, nil)
	if err != nil {
		return &attemptError{kind: "begin", err: err}
	}
	if err := s.b.AppendInTx(actx, tx, e); err != nil {
		_ = tx.Rollback() // a broken connection is discarded by the pool
		return &attemptError{kind: "append", err: err}
	}
	if err := intent(); err != nil {
		_ = tx.Rollback()
		return err
	}
	err = tx.Commit()
	switch {
	case err == nil:
		return nil
	case mysqlRolledBack(err):
		return &attemptError{kind: "commit-rolled-back", err: err}
	default:
		return &attemptError{kind: "commit", unknown: true, err: err}
	}
}

// mysqlRolledBack reports whether a Commit error means the transaction
// certainly did not commit: the server answered COMMIT with a deadlock
// (ER_LOCK_DEADLOCK rolls the whole transaction back), or database/sql
// had already ended the transaction (sql.ErrTxDone) and sent no COMMIT.
// Anything else (a connection that died, ER_CONNECTION_KILLED, a
// shutdown) may have come after the commit was durable: unknown.
func mysqlRolledBack(err error) bool {
	if errors.Is(err, sql.ErrTxDone) {
		return true
	}
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}
