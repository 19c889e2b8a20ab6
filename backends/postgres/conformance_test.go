package pgoutbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	"github.com/outboxrelay/outbox/conformance"
)

type harness struct {
	b    *pgoutbox.Backend
	pool *pgxpool.Pool
	// opts are the options b was made with (Schema set).
	opts pgoutbox.Options
}

func (h harness) Backend() outbox.Backend[pgx.Tx]               { return h.b }
func (h harness) Begin(ctx context.Context) (pgx.Tx, error)     { return h.pool.Begin(ctx) }
func (h harness) Commit(ctx context.Context, tx pgx.Tx) error   { return tx.Commit(ctx) }
func (h harness) Rollback(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) }

// Reopen opens the harness's outbox again with pgoutbox.New, configured
// with partitions (0: the stored count); the suite closes the store
// (conformance.Reopener).
func (h harness) Reopen(ctx context.Context, partitions int) (outbox.Store, error) {
	o := h.opts
	o.Partitions = partitions
	return pgoutbox.New(ctx, h.pool, o)
}

func runConformance(t *testing.T, mode pgx.QueryExecMode, opts pgoutbox.Options) {
	conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[pgx.Tx] {
		o := opts
		o.Partitions = cfg.Partitions
		b, p := newBackend(t, mode, o)
		o.Schema = b.Options().Schema
		return harness{b: b, pool: p, opts: o}
	})
}

// TestConformance runs the suite over pgx's default extended protocol.
func TestConformance(t *testing.T) {
	t.Parallel()
	runConformance(t, pgx.QueryExecModeCacheStatement, pgoutbox.Options{})
}

// TestConformanceSimpleProtocol runs the suite over the simple protocol,
// as PgBouncer in transaction pooling mode needs (no prepared statements
// survive a transaction there).
func TestConformanceSimpleProtocol(t *testing.T) {
	t.Parallel()
	runConformance(t, pgx.QueryExecModeSimpleProtocol, pgoutbox.Options{})
}

// TestConformanceTrailingNotifications runs the suite with a NotifyInterval
// so long that only the first append of each Backend notifies in its
// transaction: every later one is covered by a trailing notification,
// which the Notifier cases check (after commit only, none for a rollback).
func TestConformanceTrailingNotifications(t *testing.T) {
	t.Parallel()
	runConformance(t, pgx.QueryExecModeCacheStatement, pgoutbox.Options{NotifyInterval: time.Hour})
}
