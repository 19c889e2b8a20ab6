package pgoutbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxrelay/outbox"
)

// Compile-time checks of the retention interfaces.
var (
	_ outbox.ArchiveJanitor = (*Backend)(nil)
	_ outbox.ParkedPurger   = (*Backend)(nil)
)

// ErrArchiveLockTimeout is wrapped by the error of a retention call
// ([Backend.PurgeArchiveBatch], [Backend.MaintainArchive],
// [Backend.PurgeParked]) or of [PartitionArchive] that could not have a
// lock within Options.ArchiveLockTimeout (SQLSTATE 55P03): another
// transaction holds the archive, a partition of it, or rows the call had to
// wait for. The call changed nothing; call it again later (the relay does,
// in its next retention round).
var ErrArchiveLockTimeout = errors.New("pgoutbox: a lock on the archive was not granted within Options.ArchiveLockTimeout")

// ArchiveDaysAhead is how many days after the current UTC day
// [Backend.MaintainArchive] (and [Migrate] with Options.ArchivePartitioned)
// makes the partitions of a partitioned archive for: the current day's and
// those of the next ArchiveDaysAhead days, so a relay that is down for up
// to that long (no retention round) still finds a partition for each day's
// sent entries.
const ArchiveDaysAhead = 3

// retentionStatementTimeout bounds each statement of a retention call
// (SET LOCAL statement_timeout): a batch is bounded by its limit and takes
// milliseconds; this only stops a call that went wrong.
const retentionStatementTimeout = 30 * time.Second

// archiveShape is the form of the archive New found (or MarkSent found
// since, see redetectArchive), with the MarkSent statements for it.
type archiveShape struct {
	// partitioned reports an archive partitioned by sent_at.
	partitioned bool
	// markSent and markSentTID are queries/mark_sent.sql and
	// queries/mark_sent_tid.sql with the archive insert of this shape.
	markSent, markSentTID string
}

// retentionTx runs fn in a transaction whose lock_timeout is
// Options.ArchiveLockTimeout and statement_timeout
// retentionStatementTimeout (0: none), with TimeZone UTC and DateStyle ISO
// so partition bounds read from the catalogue parse the same everywhere.
// A lock not granted in time becomes an error wrapping
// ErrArchiveLockTimeout.
func (b *Backend) retentionTx(ctx context.Context, op string, stmtTimeout time.Duration, fn func(pgx.Tx) error) error {
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if err := setLocalTimeouts(ctx, tx, b.opts.ArchiveLockTimeout, stmtTimeout); err != nil {
			return err
		}
		return fn(tx)
	})
	return b.retentionError(op, err)
}

// setLocalTimeouts sets lock_timeout, statement_timeout (0: none),
// TimeZone and DateStyle for the rest of tx, in one round trip.
func setLocalTimeouts(ctx context.Context, tx pgx.Tx, lock, stmt time.Duration) error {
	_, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true),
       set_config('TimeZone', 'UTC', true), set_config('DateStyle', 'ISO', true)`,
		millis(lock), millis(stmt))
	return err
}

// millis renders d as whole milliseconds, rounded up, for a timeout
// setting ("0" turns it off).
func millis(d time.Duration) string {
	return strconv.FormatInt(int64((d+time.Millisecond-1)/time.Millisecond), 10)
}

// retentionError maps a retention call's error: a lock not granted in
// time wraps ErrArchiveLockTimeout; context errors pass through.
func (b *Backend) retentionError(op string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		return fmt.Errorf("pgoutbox: %s: %w (%v): another transaction holds %s or a partition of it; nothing was changed, call again later: %v",
			op, ErrArchiveLockTimeout, b.opts.ArchiveLockTimeout, b.names.archive, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return b.interpretError(op, err)
}

// MaintainArchive makes the partitions of a partitioned archive for the
// UTC day of now and the [ArchiveDaysAhead] days after it, each
// "<table>_archive_pYYYYMMDD" for [day, next day), skipping days a
// partition already covers. It remembers the last day it made sure of, so
// a call on the same day returns without a query. That first call of a
// day also reads whether the archive is partitioned (one catalogue
// query), so a Backend made before [PartitionArchive] converted the
// archive follows the conversion within a day even if it never archives. Creating a partition
// takes an ACCESS EXCLUSIVE lock on the archive (MarkSent of archiving
// relays waits behind it), for at most Options.ArchiveLockTimeout: when
// that lock is not granted in time the call fails with an error wrapping
// [ErrArchiveLockTimeout] and the partitions are made by a later call. A
// day whose rows already sit in the DEFAULT partition (no partition was
// made for it in time) cannot get one; that is logged at WARN to
// Options.Logger and the day is skipped: its rows stay in the DEFAULT
// partition and retention deletes them in batches. On a plain archive it
// changes nothing. Safe for concurrent use; after Close it returns an error
// wrapping [outbox.ErrClosed]. See [outbox.ArchiveJanitor].
func (b *Backend) MaintainArchive(ctx context.Context, now time.Time) error {
	const op = "MaintainArchive"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	day := utcDay(now)
	last := day.AddDate(0, 0, ArchiveDaysAhead)
	if b.ensuredUntil.Load() >= last.Unix() {
		return nil
	}
	// Once a day: the archive's form, which a conversion may have changed
	// since New (a relay that does not archive never learns it from
	// MarkSent).
	partitioned, err := readArchiveShape(ctx, b.pool, b.names)
	if err != nil {
		return b.interpretError(op, err)
	}
	if partitioned != b.archive.Load().partitioned {
		b.archive.Store(&b.archiveShapes[boolIndex(partitioned)])
	}
	if partitioned {
		err := b.retentionTx(ctx, op, retentionStatementTimeout, func(tx pgx.Tx) error {
			return ensureDayPartitions(ctx, tx, b.opts, b.names, day, last)
		})
		if err != nil {
			return err
		}
	}
	b.ensuredUntil.Store(last.Unix())
	return nil
}

// utcDay is the start of t's UTC day.
func utcDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// PurgeArchiveBatch removes archived entries sent before before, oldest
// first, in one transaction whose lock_timeout is
// Options.ArchiveLockTimeout and whose statement_timeout is 30 seconds.
//
// A plain archive: one DELETE of at most limit rows, chosen in sent_at
// order (the sent_at index) FOR UPDATE SKIP LOCKED, so rows another
// transaction holds are skipped, not waited for, and removed by a later
// call; more is removed == limit.
//
// A partitioned archive: when a day partition's whole range lies before
// before, the call drops the oldest such partition (one per call):
// removed is its row count read in the same transaction just before the
// drop (no row is added to a day already past): the catalogue's estimate
// (pg_class.reltuples) when the partition was vacuumed or analyzed since
// it was filled, else an exact count(*) (which blocks nobody and runs
// without the statement timeout); more is true. The
// drop first locks that partition (ACCESS EXCLUSIVE), then the archive
// for the DROP itself; each wait is bounded by Options.ArchiveLockTimeout,
// and MarkSent of archiving relays waits behind the archive's lock for at
// most that long, plus the time the lock is then held (the DROP and the
// commit: a catalogue change, milliseconds). A lock not granted in time fails the call with an error
// wrapping [ErrArchiveLockTimeout], having changed nothing (the relay
// logs it and tries again in its next round). When no day partition is
// entirely old, the rows sent before before in the DEFAULT partition and
// in a plain archive attached by [PartitionArchive] are deleted as in a
// plain archive, at most limit in all (more is removed == limit). The
// rows of the day partition that before falls in are not deleted: they
// go with their partition once the whole day is before before, so the
// archive keeps entries for up to one day longer than asked, and deletes
// no row of a day partition (no dead tuples there).
//
// A limit below 1 fails with [outbox.ErrInvalidArgument]. It works
// without Options.Archive too (on an empty archive it returns 0, false,
// nil). Safe for concurrent use; after Close it returns an error wrapping
// [outbox.ErrClosed]. See [outbox.ArchiveJanitor].
func (b *Backend) PurgeArchiveBatch(ctx context.Context, before time.Time, limit int) (removed int64, more bool, err error) {
	const op = "PurgeArchiveBatch"
	if err := b.checkOpen(op); err != nil {
		return 0, false, err
	}
	if limit < 1 {
		return 0, false, fmt.Errorf("pgoutbox: %s: limit is %d, must be 1 or more: %w", op, limit, outbox.ErrInvalidArgument)
	}
	partitioned := b.archive.Load().partitioned
	err = b.retentionTx(ctx, op, retentionStatementTimeout, func(tx pgx.Tx) error {
		if partitioned {
			var err error
			removed, more, err = b.purgePartitioned(ctx, tx, before, limit)
			return err
		}
		if err := tx.QueryRow(ctx, b.qPurge, before, limit).Scan(&removed); err != nil {
			return err
		}
		more = removed == int64(limit)
		return nil
	})
	if err != nil {
		return 0, false, err
	}
	return removed, more, nil
}

// purgePartitioned is PurgeArchiveBatch of a partitioned archive, in tx:
// the drop of the oldest day partition wholly before before, or else
// batches of at most limit rows (in all) from the partitions that are not
// day partitions (the one a conversion attached, then DEFAULT).
func (b *Backend) purgePartitioned(ctx context.Context, tx pgx.Tx, before time.Time, limit int) (int64, bool, error) {
	parts, err := listPartitions(ctx, tx, b.names)
	if err != nil {
		return 0, false, err
	}
	n, dropped, err := dropOldPartition(ctx, tx, parts, before)
	if err != nil || dropped {
		return n, dropped, err
	}
	var removed int64
	for _, p := range parts {
		if !p.def && !p.from.IsZero() {
			continue // a day partition: dropped whole once past before
		}
		var n int64
		q := strings.ReplaceAll(b.qPurgeTemplate, "{archive}", p.name)
		if err := tx.QueryRow(ctx, q, before, limit-int(removed)).Scan(&n); err != nil {
			return 0, false, err
		}
		if removed += n; removed == int64(limit) {
			return removed, true, nil
		}
	}
	return removed, false, nil
}

// OldestArchived reads min(sent_at) of the archive (one descent of the
// sent_at index, of each partition when it is partitioned); ok is false
// when the archive is empty. Safe for concurrent use; after Close it
// returns an error wrapping [outbox.ErrClosed]. See
// [outbox.ArchiveJanitor].
func (b *Backend) OldestArchived(ctx context.Context) (sent time.Time, ok bool, err error) {
	const op = "OldestArchived"
	if err := b.checkOpen(op); err != nil {
		return time.Time{}, false, err
	}
	var t pgtype.Timestamptz
	if err := b.pool.QueryRow(ctx, b.qOldestArchived).Scan(&t); err != nil {
		return time.Time{}, false, b.interpretError(op, err)
	}
	if !t.Valid {
		return time.Time{}, false, nil
	}
	return t.Time, true, nil
}

// PurgeParked deletes at most limit parked entries whose park time
// (parked_at, migration 008: set when MarkFailed or FetchBatch parks an
// entry, or Import imports one parked; cleared by Requeue) is before
// before, oldest park first, in one transaction whose lock_timeout is
// Options.ArchiveLockTimeout, and returns their IDs. Rows another
// transaction holds are skipped (FOR UPDATE SKIP LOCKED). Pending entries,
// and entries parked by a hand-made UPDATE that left parked_at NULL, are
// never deleted. Deleting a parked entry is what [Backend.Cancel] of it
// does: the row goes, the per-key sequence keeps the gap. more is
// len(ids) == limit. A limit below 1 fails with
// [outbox.ErrInvalidArgument]. Safe for concurrent use; after Close it
// returns an error wrapping [outbox.ErrClosed]. See
// [outbox.ParkedPurger].
func (b *Backend) PurgeParked(ctx context.Context, before time.Time, limit int) (ids []string, more bool, err error) {
	const op = "PurgeParked"
	if err := b.checkOpen(op); err != nil {
		return nil, false, err
	}
	if limit < 1 {
		return nil, false, fmt.Errorf("pgoutbox: %s: limit is %d, must be 1 or more: %w", op, limit, outbox.ErrInvalidArgument)
	}
	err = b.retentionTx(ctx, op, retentionStatementTimeout, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, b.qPurgeParked, before, limit)
		if err != nil {
			return err
		}
		ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return ids, len(ids) == limit, nil
}

// ArchivePartitioned reports whether the archive is partitioned by day,
// as New found it (or MarkSent found it since: a relay whose archive was
// converted by [PartitionArchive] while it ran switches on its first
// MarkSent after the conversion).
func (b *Backend) ArchivePartitioned() bool { return b.archive.Load().partitioned }

// readArchiveShape reports whether the archive is partitioned (a row of
// pg_partitioned_table).
func readArchiveShape(ctx context.Context, q querier, n names) (bool, error) {
	var partitioned bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass($1))`, n.archive).Scan(&partitioned)
	return partitioned, err
}

// querier is what a pool, a connection and a transaction share.
type querier interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}

// redetectArchive is called when MarkSent failed in a way a change of the
// archive's form explains (SQLSTATE 42P10: ON CONFLICT (id) on an archive
// that is now partitioned, which has no unique index on id; 23505 on the
// archive: a plain INSERT into an archive that is plain again): it reads
// the form again and switches the MarkSent statements. The failed call's
// error is returned as it was (its transaction changed nothing); the
// relay's next MarkSent uses the new statements.
func (b *Backend) redetectArchive(ctx context.Context, err error) {
	var pgErr *pgconn.PgError
	if !b.opts.Archive || !errors.As(err, &pgErr) || (pgErr.Code != "42P10" && pgErr.Code != "23505") {
		return
	}
	partitioned, rerr := readArchiveShape(ctx, b.pool, b.names)
	if rerr != nil || partitioned == b.archive.Load().partitioned {
		return
	}
	b.opts.Logger.Info("pgoutbox: the archive changed form; MarkSent switches statements", "archive", b.names.archive, "partitioned", partitioned)
	b.archive.Store(&b.archiveShapes[boolIndex(partitioned)])
}

func boolIndex(v bool) int {
	if v {
		return 1
	}
	return 0
}
