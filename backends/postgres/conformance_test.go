package pgoutbox_test

import (
	"context"
	"fmt"
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

// Corruptions names the columns Corrupt damages (conformance.Corrupter);
// each is a way a hand-made UPDATE stops an entry from being published,
// which FetchBatch parks (see docs/postgres.md, "Corrupt rows").
func (h harness) Corruptions() []string {
	return []string{"headers column", "empty topic column"}
}

// Corrupt damages the row of id with a real UPDATE of the harness's
// table: bytes DecodeHeaders does not accept in headers (a length running
// past the end, as in issue 18), or an empty topic.
func (h harness) Corrupt(ctx context.Context, id, how string) error {
	name := h.opts.Table
	if name == "" {
		name = "outbox"
	}
	table := pgx.Identifier{h.opts.Schema, name}.Sanitize()
	var set string
	switch how {
	case "headers column":
		set = `headers = '\xdeadbeef00ff'::bytea`
	case "empty topic column":
		set = `topic = ''`
	default:
		return fmt.Errorf("harness: unknown corruption %q", how)
	}
	tag, err := h.pool.Exec(ctx, "UPDATE "+table+" SET "+set+" WHERE id = $1", id)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("harness: no row has id %q", id)
	}
	return err
}

var _ conformance.Corrupter = harness{}

// ArchiveKeepsPartitions: a partitioned archive keeps today's partition
// whole until the whole day is past the horizon (retention_test.go checks
// the drops).
func (h harness) ArchiveKeepsPartitions() bool { return h.opts.ArchivePartitioned }

var _ conformance.PartitionedArchive = harness{}

func runConformance(t *testing.T, mode pgx.QueryExecMode, opts pgoutbox.Options) {
	conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[pgx.Tx] {
		o := opts
		o.Partitions = cfg.Partitions
		o.Archive = o.Archive || cfg.Archive
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

// TestConformancePartitionedArchive runs the suite with every sent entry
// archived into an archive partitioned by day (Options.ArchivePartitioned
// at Migrate): MarkSent's plain INSERT into the partitioned table.
func TestConformancePartitionedArchive(t *testing.T) {
	t.Parallel()
	runConformance(t, pgx.QueryExecModeCacheStatement, pgoutbox.Options{Archive: true, ArchivePartitioned: true})
}
