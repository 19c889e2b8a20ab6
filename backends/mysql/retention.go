package mysqloutbox

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
)

// Compile-time checks of the retention interfaces.
var (
	_ outbox.ArchiveJanitor = (*Backend)(nil)
	_ outbox.ParkedPurger   = (*Backend)(nil)
)

// PurgeLockWait is the longest a statement of [Backend.PurgeArchiveBatch]
// or [Backend.PurgeParked] waits for a row lock: their transactions run
// with the session's innodb_lock_wait_timeout set to it (1 s, the
// smallest value MySQL accepts), and the connection's own value is put
// back after. They lock rows with SKIP LOCKED and then delete only the
// rows they locked, under READ COMMITTED (no gap locks), so they are not
// expected to wait at all: the bound is for what that reasoning misses.
const PurgeLockWait = time.Second

// retentionQueries are the rendered statements of the retention
// interfaces.
type retentionQueries struct {
	archiveLock, archiveDelete, oldestArchived string
	parkedLock, parkedDelete, parkedStamp      string
}

// retentionQuery is queries/name.sql rendered: tables, the partition
// list and the index names of the FORCE INDEX hints.
func (b *Backend) retentionQuery(name string) string {
	idx := "`" + b.opts.Table + "_archive_sent_idx`"
	return strings.ReplaceAll(b.renderRelay(b.opsQuery(name)), "{archive_sent_idx}", idx)
}

func (b *Backend) initRetention() {
	q := &b.ops.retention
	q.archiveLock, q.archiveDelete = b.retentionQuery("purge_archive_lock"), b.retentionQuery("purge_archive_delete")
	q.oldestArchived = b.retentionQuery("oldest_archived")
	q.parkedLock, q.parkedDelete = b.retentionQuery("purge_parked_lock"), b.retentionQuery("purge_parked_delete")
	q.parkedStamp = b.retentionQuery("purge_parked_stamp")
}

// MaintainArchive does nothing and returns nil: the archive is one plain
// table ([outbox.ArchiveJanitor]). After Close it returns
// [outbox.ErrClosed].
func (b *Backend) MaintainArchive(ctx context.Context, now time.Time) error {
	return b.checkOpen("MaintainArchive")
}

// PurgeArchiveBatch removes at most limit archived entries sent before
// before, oldest first, in one READ COMMITTED transaction on one pool
// connection: SELECT ... FOR UPDATE SKIP LOCKED through the sent_at index
// (queries/purge_archive_lock.sql), then a DELETE of the rows it locked
// by primary key, with innodb_lock_wait_timeout at [PurgeLockWait] for
// the transaction (seven round trips: the session setting and its
// restore, isolation level, begin, the two statements, commit). Rows
// another transaction holds are skipped, not waited for. more is true
// when the call removed limit rows (entries sent before before may
// remain). It returns (0, false, nil) when nothing is older than before,
// also when Options.Archive is off (the archive table then stays empty).
// A limit below 1 is an error wrapping [outbox.ErrInvalidArgument]; after
// Close it returns [outbox.ErrClosed]. Safe for concurrent use, also
// with itself and [Backend.PurgeArchive] (see [outbox.ArchiveJanitor]).
func (b *Backend) PurgeArchiveBatch(ctx context.Context, before time.Time, limit int) (removed int64, more bool, err error) {
	const op = "PurgeArchiveBatch"
	if err := b.checkOpen(op); err != nil {
		return 0, false, err
	}
	if limit < 1 {
		return 0, false, fmt.Errorf("%s: %s: limit is %d; use 1 or more: %w", pkgName, op, limit, outbox.ErrInvalidArgument)
	}
	err = b.boundedTx(ctx, func(tx *sql.Tx) error {
		ids, err := queryStrings(ctx, tx, b.ops.retention.archiveLock, horizonMicros(before), limit)
		if err != nil || len(ids) == 0 {
			return err
		}
		res, err := tx.ExecContext(ctx, b.ops.retention.archiveDelete, jsonArg(ids))
		if err != nil {
			return err
		}
		removed, err = res.RowsAffected()
		more = len(ids) == limit
		return err
	})
	if err != nil {
		return 0, false, b.opsError(ctx, op, err)
	}
	return removed, more, nil
}

// OldestArchived reports the send time of the oldest archived entry (one
// read of the sent_at index); ok is false when the archive is empty.
// After Close it returns [outbox.ErrClosed]. Safe for concurrent use.
func (b *Backend) OldestArchived(ctx context.Context) (sent time.Time, ok bool, err error) {
	const op = "OldestArchived"
	if err := b.checkOpen(op); err != nil {
		return time.Time{}, false, err
	}
	var us sql.NullInt64
	if err := b.db.QueryRowContext(ctx, b.ops.retention.oldestArchived).Scan(&us); err != nil {
		return time.Time{}, false, b.opsError(ctx, op, err)
	}
	if !us.Valid {
		return time.Time{}, false, nil
	}
	return fromMicros(us.Int64), true, nil
}

// PurgeParked removes at most limit entries parked before before (by
// their park time, the parked_at column that parking sets: see migration
// 002), oldest park first, and returns their IDs. Each is deleted as
// [Backend.Cancel] deletes an entry: its row goes, with its attempt
// history. It runs one READ COMMITTED transaction like
// [Backend.PurgeArchiveBatch]'s (SKIP LOCKED, innodb_lock_wait_timeout at
// [PurgeLockWait]); pending entries are never read for removal, and a
// requeued entry is a pending row without a park time. A parked row
// without a park time (parked by a relay of a build before migration
// 002, or imported parked) is given the current time instead of being
// removed, and counts against limit. more is true when the call took
// limit rows. Rows whose partition column is outside 0..Partitions()-1
// (written by hand) are not read. A limit below 1 is an error wrapping
// [outbox.ErrInvalidArgument]; after Close it returns
// [outbox.ErrClosed]. Safe for concurrent use.
func (b *Backend) PurgeParked(ctx context.Context, before time.Time, limit int) (ids []string, more bool, err error) {
	const op = "PurgeParked"
	if err := b.checkOpen(op); err != nil {
		return nil, false, err
	}
	if limit < 1 {
		return nil, false, fmt.Errorf("%s: %s: limit is %d; use 1 or more: %w", pkgName, op, limit, outbox.ErrInvalidArgument)
	}
	err = b.boundedTx(ctx, func(tx *sql.Tx) error {
		ids = nil
		var del, stamp []int64
		rows, err := tx.QueryContext(ctx, b.ops.retention.parkedLock, horizonMicros(before), limit)
		if err != nil {
			return err
		}
		for rows.Next() {
			var seq int64
			var id []byte
			var unstamped bool
			if err := rows.Scan(&seq, &id, &unstamped); err != nil {
				rows.Close()
				return err
			}
			if unstamped {
				stamp = append(stamp, seq)
			} else {
				del, ids = append(del, seq), append(ids, string(id))
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		more = len(del)+len(stamp) == limit
		if len(stamp) > 0 {
			if _, err := tx.ExecContext(ctx, b.ops.retention.parkedStamp, jsonArg(stamp)); err != nil {
				return err
			}
		}
		if len(del) > 0 {
			if _, err := tx.ExecContext(ctx, b.ops.retention.parkedDelete, jsonArg(del)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, false, b.opsError(ctx, op, err)
	}
	return ids, more, nil
}

// boundedTx runs fn in a READ COMMITTED transaction on a connection of
// its own whose innodb_lock_wait_timeout is [PurgeLockWait] for the
// transaction, then puts the connection's value back. A connection whose
// value could not be put back is closed instead of returned to the pool.
func (b *Backend) boundedTx(ctx context.Context, fn func(*sql.Tx) error) error {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET @outbox_lock_wait = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = %d", int(PurgeLockWait/time.Second))); err != nil {
		discard(conn)
		return err
	}
	err = runTx(ctx, conn, fn)
	if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), "SET SESSION innodb_lock_wait_timeout = @outbox_lock_wait"); rerr != nil {
		discard(conn)
		return errors.Join(err, rerr)
	}
	return errors.Join(err, conn.Close())
}

// runTx runs fn in a READ COMMITTED transaction on conn and commits.
func runTx(ctx context.Context, conn *sql.Conn, fn func(*sql.Tx) error) error {
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// discard closes conn and drops it from the pool (its session settings
// are unknown).
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// queryStrings runs q in tx and returns the first column of its rows.
func queryStrings(ctx context.Context, tx *sql.Tx, q string, args ...any) ([]string, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s []byte
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, string(s))
	}
	return out, rows.Err()
}

// DATETIME's range, as microseconds since the Unix epoch.
var (
	minDatetime = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	maxDatetime = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC).UnixMicro()
)

// horizonMicros is before as microseconds since the Unix epoch, within
// DATETIME's range (a zero time removes nothing, a far one everything).
func horizonMicros(before time.Time) int64 {
	if before.Year() < 1000 {
		return minDatetime
	}
	if before.Year() > 9999 {
		return maxDatetime
	}
	return before.UnixMicro()
}
