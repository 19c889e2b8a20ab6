package mysqloutbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxrelay/outbox"
)

// This file implements the inspection interfaces: outbox.Canceler,
// outbox.Inspector, outbox.PartitionInspector and outbox.Looker.

// Cancel deletes a pending or parked entry in one statement
// (queries/cancel.sql). A relay that fetched the entry before may still
// publish it; once Cancel returns nil the entry is never fetched again.
// Unknown, sent and cancelled IDs give an error wrapping
// [outbox.ErrNotFound] (IDs are compared byte for byte), and so does an
// ID that no entry can have (empty, or invalid UTF-8), without a query.
// The statement runs on its own (autocommit): if ctx ends while it waits
// for a row lock, the server may still delete the entry. Safe for
// concurrent use; after Close it returns [outbox.ErrClosed]. See
// [outbox.Canceler].
func (b *Backend) Cancel(ctx context.Context, id string) error {
	const op = "Cancel"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	notFound := fmt.Errorf("%s: %s: no pending or parked entry has ID %q (never appended, already sent or cancelled): %w", pkgName, op, id, outbox.ErrNotFound)
	if !validText(id) || id == "" {
		return notFound
	}
	res, err := b.db.ExecContext(ctx, b.ops.qCancel, id)
	if err != nil {
		return b.opsError(ctx, op, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return b.opsError(ctx, op, err)
	} else if n == 0 {
		return notFound
	}
	return nil
}

// Stats counts pending, due and parked entries in one statement
// (queries/stats.sql), a read of the due index, which holds every column
// it needs; its cost grows with the number of stored entries. It counts
// every row, also those whose partition column is outside
// 0..Partitions()-1 (which no relay fetches: their age shows in
// OldestDue) and which [Backend.PartitionStats] does not list. Due is
// judged by the server's clock; claimed entries count as due. Safe for
// concurrent use; after Close it returns [outbox.ErrClosed]. See
// [outbox.Inspector].
func (b *Backend) Stats(ctx context.Context) (outbox.Stats, error) {
	const op = "Stats"
	if err := b.checkOpen(op); err != nil {
		return outbox.Stats{}, err
	}
	var s outbox.Stats
	var oldest sql.NullInt64
	if err := b.db.QueryRowContext(ctx, b.ops.qStats).Scan(&s.Pending, &s.Due, &s.Parked, &oldest); err != nil {
		return outbox.Stats{}, b.opsError(ctx, op, err)
	}
	s.OldestDue = nullTime(oldest)
	return s, nil
}

// Parked lists parked entries ordered by the bytes of their IDs (as Go
// compares strings), after the ID after, at
// most limit, in one statement (queries/parked.sql: a sort of the parked
// rows after after). An entry that cannot be published as stored (its
// headers column does not decode, its topic column is empty, its
// partition column is outside 0..Partitions()-1) is listed with what
// could be read (nil Headers when they do not decode) and a LastError
// naming the column and the fix, followed by the stored last error when
// that is something else. A limit that is not positive gives an error
// wrapping [outbox.ErrInvalidArgument]. Safe for concurrent use; after
// Close it returns [outbox.ErrClosed]. See [outbox.Inspector].
func (b *Backend) Parked(ctx context.Context, after string, limit int) ([]outbox.Entry, error) {
	const op = "Parked"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%s: %s: limit is %d, must be positive: %w", pkgName, op, limit, outbox.ErrInvalidArgument)
	}
	infos, err := b.queryEntries(ctx, op, b.ops.qParked, bytesArg(after), limit)
	if err != nil {
		return nil, err
	}
	var out []outbox.Entry
	for _, info := range infos {
		out = append(out, info.Entry)
	}
	return out, nil
}

// queryEntries runs a statement whose columns are entryColumns and
// returns the rows as Lookup reports them.
func (b *Backend) queryEntries(ctx context.Context, op, q string, args ...any) ([]outbox.EntryInfo, error) {
	rows, err := b.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, b.opsError(ctx, op, err)
	}
	defer rows.Close()
	var out []outbox.EntryInfo
	for rows.Next() {
		var r entryRow
		if err := rows.Scan(r.targets()...); err != nil {
			return nil, b.opsError(ctx, op, err)
		}
		out = append(out, r.info(b.opts.Partitions))
	}
	if err := rows.Err(); err != nil {
		return nil, b.opsError(ctx, op, err)
	}
	return out, nil
}

// Requeue moves parked entries back to pending, due now by the server's
// clock, attempts reset, not deferred, last error and attempt history
// kept. A requeued entry is ordered as if appended now: it gets a new seq
// from the table's AUTO_INCREMENT counter (entries requeued in one call
// get theirs in the order of their old seqs), so it comes after the
// entries of its key appended before, and an earlier entry of its key
// that is failing holds it back.
//
// Each chunk of up to 1000 IDs is one transaction of four statements
// (queries/requeue_*.sql): the first locks the parked rows among the IDs
// and reads their topic, headers and partition columns; for those that
// can be published as stored, the second gives the old rows placeholder
// IDs, the third copies them as new rows with their IDs (the server
// copies payload and headers: nothing is read back to the client) and the
// last deletes the old rows. MySQL cannot change a row's AUTO_INCREMENT
// key to a new counter value in place, hence the copy.
//
// An entry that cannot be published as stored (its topic column is
// empty, its headers column does not decode, or its partition column is
// outside 0..Partitions()-1) stays parked: Requeue returns the count of
// the others with an [*outbox.RequeueRefusedError] (wrapping
// [outbox.ErrNotRequeueable]) whose Refused lists each such entry once,
// in the order of ids, with a reason naming the column and the fix. IDs
// that name no parked entry (pending, sent, unknown, invalid UTF-8) are
// skipped and not counted. An empty ids does nothing and returns 0, nil; Requeue does not
// keep ids. Requeue is not an append: it works on a sealed outbox. Safe
// for concurrent use; after Close it returns [outbox.ErrClosed]. See
// [outbox.Inspector].
func (b *Backend) Requeue(ctx context.Context, ids ...string) (int, error) {
	const op = "Requeue"
	if err := b.checkOpen(op); err != nil {
		return 0, err
	}
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !validText(id) || id == "" })
	total := 0
	reasons := map[string]string{}
	for chunk := range slices.Chunk(ids, maxIDsPerStatement) {
		n, err := b.requeueChunk(ctx, chunk, reasons)
		if err != nil {
			return total, b.opsError(ctx, op, err)
		}
		total += n
	}
	if len(reasons) == 0 {
		return total, nil
	}
	refused := &outbox.RequeueRefusedError{}
	for _, id := range ids {
		if r, ok := reasons[id]; ok {
			refused.Refused = append(refused.Refused, outbox.Refusal{ID: id, Reason: r})
			delete(reasons, id)
		}
	}
	// Returned as is, not wrapped: the reasons name the package, and
	// callers may assert the type as the SPI documents it.
	return total, refused
}

// requeueChunk requeues the parked entries among ids in one transaction
// and adds the reasons of those it refused to reasons.
func (b *Backend) requeueChunk(ctx context.Context, ids []string, reasons map[string]string) (int, error) {
	var n int
	err := b.inTx(ctx, func(tx *sql.Tx) error {
		n = 0
		rows, err := tx.QueryContext(ctx, strings.Replace(b.ops.qRequeueCheck, "{ids}", placeholders(len(ids)), 1), anyArgs(nil, ids)...)
		if err != nil {
			return err
		}
		var seqs []any
		var caseArgs []any
		for rows.Next() {
			var (
				seq, part int64
				id, topic string
				headers   []byte
			)
			if err := rows.Scan(&seq, &id, &topic, &headers, &part); err != nil {
				rows.Close()
				return err
			}
			if c := checkRow(topic, headers, part, b.opts.Partitions); c.reason != "" {
				reasons[id] = c.reason
				continue
			}
			seqs = append(seqs, seq)
			caseArgs = append(caseArgs, seq, id)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(seqs) == 0 {
			return nil
		}
		in := placeholders(len(seqs))
		if _, err := tx.ExecContext(ctx, strings.Replace(b.ops.qRequeueMark, "{seqs}", in, 1), seqs...); err != nil {
			return err
		}
		byseq := "CASE o.seq" + strings.Repeat(" WHEN ? THEN ?", len(seqs)) + " END"
		copyQ := strings.NewReplacer("{ids_by_seq}", byseq, "{seqs}", in).Replace(b.ops.qRequeueCopy)
		if _, err := tx.ExecContext(ctx, copyQ, append(caseArgs, seqs...)...); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, strings.Replace(b.ops.qRequeueDrop, "{seqs}", in, 1), seqs...); err != nil {
			return err
		}
		n = len(seqs)
		return nil
	})
	return n, err
}

// PartitionStats reports the counts, the live lease, the oldest due
// entry's ID and the number of blocked keys (those [Backend.BlockedKeys]
// lists) of every partition in two statements of one read-only
// REPEATABLE READ transaction, so both read one snapshot:
// queries/partition_stats.sql reads the counts (split by partition as
// [Backend.Stats] counts them, so they add up to what Stats reports at
// that moment), the oldest due entry and the lease rows, judged by one
// reading of the server's clock; queries/blocked_counts.sql counts the
// blocked keys. A partition whose lease row is free, expired or missing
// has a zero Lease. Rows whose partition column is outside
// 0..Partitions()-1 are in no partition's counts (Stats counts them).
// Safe for concurrent use; makes no change; after Close it returns
// [outbox.ErrClosed]. See [outbox.PartitionInspector].
func (b *Backend) PartitionStats(ctx context.Context) ([]outbox.PartitionStats, error) {
	const op = "PartitionStats"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	var out []outbox.PartitionStats
	err := b.readOnly(ctx, func(tx *sql.Tx) error {
		out = make([]outbox.PartitionStats, b.opts.Partitions)
		for i := range out {
			out[i].Partition = i
		}
		if err := b.scanPartitionStats(ctx, tx, out); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, b.ops.qBlockedCounts)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var part, n int64
			if err := rows.Scan(&part, &n); err != nil {
				return err
			}
			if part >= 0 && part < int64(len(out)) {
				out[part].BlockedKeys = n
			}
		}
		return rows.Err()
	})
	if err != nil {
		return nil, b.opsError(ctx, op, err)
	}
	return out, nil
}

// scanPartitionStats runs queries/partition_stats.sql and fills in out,
// one element per partition, with its rows; rows of partitions outside
// 0..len(out)-1 are left out.
func (b *Backend) scanPartitionStats(ctx context.Context, tx *sql.Tx, out []outbox.PartitionStats) error {
	rows, err := tx.QueryContext(ctx, b.ops.qPartitionStats)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			s               outbox.PartitionStats
			part            int64
			oldest, expires sql.NullInt64
			dueID           sql.NullString
		)
		if err := rows.Scan(&part, &s.Pending, &s.Due, &s.Parked, &oldest, &dueID, &s.Lease.Owner, &s.Lease.Version, &expires); err != nil {
			return err
		}
		if part < 0 || part >= int64(len(out)) {
			continue
		}
		s.Partition = int(part)
		s.OldestDue, s.OldestDueID = nullTime(oldest), dueID.String
		if s.Lease.Owner != "" {
			s.Lease.Partition, s.Lease.Expires = s.Partition, nullTime(expires)
		} else {
			s.Lease = outbox.Lease{}
		}
		out[part] = s
	}
	return rows.Err()
}

// readOnly runs fn in a read-only REPEATABLE READ transaction, whose
// statements read one snapshot.
func (b *Backend) readOnly(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to keep
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// Lookup returns the pending or parked entry with the given ID in one
// statement by the unique index on id (queries/lookup.sql). DueAt is the
// entry's next attempt time by the server's clock (its NotBefore or
// append time, or the retry time MarkFailed stored), zero when it is
// parked. IDs are compared byte for byte; an ID no entry can have (empty,
// or invalid UTF-8) is not found without a query. A stored entry that
// cannot be published as stored (headers that do not decode, an empty
// topic, a partition outside 0..Partitions()-1) is returned, not an
// error, with what could be read and a LastError naming the column and
// the fix, as [Backend.Parked] does. A negative attempts column reads as
// 0. History is the attempt history MarkFailed kept (oldest first) and
// Deferred reports a pending entry an open breaker deferred. Safe for
// concurrent use; after Close it returns [outbox.ErrClosed]. See
// [outbox.Looker].
func (b *Backend) Lookup(ctx context.Context, id string) (outbox.EntryInfo, error) {
	const op = "Lookup"
	if err := b.checkOpen(op); err != nil {
		return outbox.EntryInfo{}, err
	}
	notFound := fmt.Errorf("%s: %s: no pending or parked entry has ID %q (never appended, already sent or cancelled): %w", pkgName, op, id, outbox.ErrNotFound)
	if !validText(id) || id == "" {
		return outbox.EntryInfo{}, notFound
	}
	var r entryRow
	err := b.db.QueryRowContext(ctx, b.ops.qLookup, id).Scan(r.targets()...)
	if errors.Is(err, sql.ErrNoRows) {
		return outbox.EntryInfo{}, notFound
	}
	if err != nil {
		return outbox.EntryInfo{}, b.opsError(ctx, op, err)
	}
	return r.info(b.opts.Partitions), nil
}
