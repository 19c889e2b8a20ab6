package mysqloutbox

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
)

// maxErrorLen is where MarkFailed truncates Failure.Error (bytes).
const maxErrorLen = 4096

// MarkSent deletes (or, with Options.Archive, archives) the entries,
// fenced by the lease: one multi-table DELETE (queries/mark_sent.sql)
// that reads the lease row with a shared lock, so a takeover cannot slip
// in between the check and the delete. It is one round trip when every
// ID names an entry of the partition; when fewer rows were deleted than
// IDs given (unknown or already sent IDs, or a lost lease), a second
// query tells which. With the archive, one transaction reads the lease
// row with a shared lock, copies the entries to the archive with the
// server's time as sent_at (replacing an earlier delivery of the same
// ID) and deletes them. Lists of more than 1,000 IDs are split into
// statements of 1,000, each fenced. An empty ids does nothing. Safe for
// concurrent use; after Close it returns [outbox.ErrClosed]. See
// [outbox.Store.MarkSent].
func (b *Backend) MarkSent(ctx context.Context, lease outbox.Lease, ids []string) error {
	const op = "MarkSent"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	if err := outbox.CheckPartition(b.opts.Partitions, lease.Partition); err != nil {
		return argErr(op, err)
	}
	ids = uniqueIDs(ids)
	return inChunks(len(ids), func(lo, hi int) error {
		if b.opts.Archive {
			return b.archiveSent(ctx, op, lease, ids[lo:hi])
		}
		return b.fencedExec(ctx, op, lease, b.relay.markSent, hi-lo, append([]any{jsonArg(ids[lo:hi])}, leaseArgs(lease)...)...)
	})
}

// archiveSent moves the entries to the archive in one transaction: the
// lease row read with a shared lock (queries/lock_lease.sql), the copy
// (queries/archive_sent.sql), the delete (queries/mark_sent.sql).
func (b *Backend) archiveSent(ctx context.Context, op string, lease outbox.Lease, ids []string) (err error) {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return b.relayErr(op, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var held int
	if err := tx.StmtContext(ctx, b.relay.lockLease).QueryRowContext(ctx, leaseArgs(lease)...).Scan(&held); err != nil {
		return b.relayErr(op, err)
	}
	if held == 0 {
		return fenceLost(op, lease)
	}
	arg := jsonArg(ids)
	if _, err := tx.StmtContext(ctx, b.relay.archiveSent).ExecContext(ctx, arg, lease.Partition); err != nil {
		return b.relayErr(op, err)
	}
	if _, err := tx.StmtContext(ctx, b.relay.markSent).ExecContext(ctx, append([]any{arg}, leaseArgs(lease)...)...); err != nil {
		return b.relayErr(op, err)
	}
	if err := tx.Commit(); err != nil {
		return b.relayErr(op, err)
	}
	return nil
}

// MarkFailed records the failures in one statement per 1,000 (a
// multi-table UPDATE joined to the failures, passed as one JSON array,
// queries/mark_failed.sql) fenced like [Backend.MarkSent]. A failure's
// new due time is computed by the server: UTC_TIMESTAMP(6) plus Delay,
// passed in whole microseconds (rounded away from zero, so a positive
// Delay never comes early and a negative one stays in the past). Errors
// longer than 4096 bytes are truncated at a character boundary; invalid
// UTF-8 and NUL bytes in them are replaced. Each failure that is not
// Deferred appends an [outbox.Attempt] to the entry's history column (the
// server's time, the error as stored, lease.Owner), keeping the last
// [outbox.MaxAttemptHistory]. A Deferred failure sets only the due time
// and the deferred column, which makes the entry hold back the later
// entries of its key until it is attempted, sent, parked or requeued; any
// other failure clears it. Parked and sent entries are never changed. A
// failure with both Park and Deferred fails the call with
// [outbox.ErrInvalidArgument] before anything is written. An empty
// failures does nothing. Safe for concurrent use; after Close it returns
// [outbox.ErrClosed]. See [outbox.Store.MarkFailed].
func (b *Backend) MarkFailed(ctx context.Context, lease outbox.Lease, failures []outbox.Failure) error {
	const op = "MarkFailed"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if len(failures) == 0 {
		return nil
	}
	if err := outbox.CheckPartition(b.opts.Partitions, lease.Partition); err != nil {
		return argErr(op, err)
	}
	rows := make([][5]any, 0, len(failures))
	seen := make(map[string]struct{}, len(failures))
	for i, f := range failures {
		if f.Park && f.Deferred {
			return fmt.Errorf("mysqloutbox: %s: failure %d (entry %q) has both Park and Deferred set; a deferred entry was not attempted, so it cannot be parked: set one of them: %w",
				op, i, f.ID, outbox.ErrInvalidArgument)
		}
		if _, dup := seen[f.ID]; dup || len(f.ID) > outbox.MaxIDLen {
			// One statement changes a row once: the first failure of an ID
			// in the call is the one recorded. An ID longer than
			// outbox.MaxIDLen names no entry (see uniqueIDs).
			continue
		}
		seen[f.ID] = struct{}{}
		rows = append(rows, [5]any{f.ID, cleanError(f.Error), delayMicros(f.Delay), flag(f.Park), flag(f.Deferred)})
	}
	return inChunks(len(rows), func(lo, hi int) error {
		args := append([]any{jsonArg(rows[lo:hi]), lease.Owner, lease.Owner}, leaseArgs(lease)...)
		return b.fencedExec(ctx, op, lease, b.relay.markFailed, hi-lo, args...)
	})
}

func flag(v bool) int {
	if v {
		return 1
	}
	return 0
}

// delayMicros is d in whole microseconds, rounded away from zero.
func delayMicros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	switch rem := d % time.Microsecond; {
	case rem > 0:
		us++
	case rem < 0:
		us--
	}
	return us
}

// cleanError makes s storable as utf8mb4 text (NUL bytes and invalid
// UTF-8 replaced by U+FFFD) and cuts it to at most maxErrorLen bytes, at
// a character boundary.
func cleanError(s string) string {
	return cutText(strings.ReplaceAll(s, "\x00", "\uFFFD"), maxErrorLen)
}

// Release returns unattempted entries to pending. Claims are the lease
// itself and a fetch changes nothing, so the entries already are
// pending, unchanged and in order: Release only checks, in one query
// (queries/lease_held.sql), that the lease still holds, returning an
// error wrapping [outbox.ErrLeaseLost] when it does not. An empty ids
// does nothing. Safe for concurrent use; after Close it returns
// [outbox.ErrClosed]. See [outbox.Store.Release].
func (b *Backend) Release(ctx context.Context, lease outbox.Lease, ids []string) error {
	const op = "Release"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	if err := outbox.CheckPartition(b.opts.Partitions, lease.Partition); err != nil {
		return argErr(op, err)
	}
	return b.checkLease(ctx, op, lease)
}
