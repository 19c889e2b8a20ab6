package pgoutbox

import (
	"context"
	"errors"
	"fmt"
	"github.com/outboxrelay/outbox/internal/sqlrow"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxrelay/outbox"
)

// Cancel deletes a pending or parked entry in one statement. A relay that
// fetched the entry before may still publish it; once Cancel returns nil
// the entry is never fetched again. Unknown, sent and cancelled IDs give an
// error wrapping [outbox.ErrNotFound], and so does an ID no entry can have
// (a NUL byte or invalid UTF-8, which PostgreSQL text cannot store),
// without a query. See [outbox.Canceler].
func (b *Backend) Cancel(ctx context.Context, id string) error {
	const op = "Cancel"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if !storableText(id) {
		return fmt.Errorf("pgoutbox: %s: entry %q: %w", op, id, outbox.ErrNotFound)
	}
	tag, err := b.pool.Exec(ctx, b.qCancel, id)
	if err != nil {
		return b.interpretError(op, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pgoutbox: %s: entry %q: %w", op, id, outbox.ErrNotFound)
	}
	return nil
}

// Stats counts pending, due and parked entries in one scan of the table.
// It counts every row, also those whose partition column is outside
// 0..Partitions()-1 (which no relay fetches: their age shows in
// OldestDue) and which [Backend.PartitionStats] does not list. OldestDue
// leaves out next_at values of '-infinity'. See [outbox.Inspector].
func (b *Backend) Stats(ctx context.Context) (outbox.Stats, error) {
	const op = "Stats"
	if err := b.checkOpen(op); err != nil {
		return outbox.Stats{}, err
	}
	var s outbox.Stats
	var oldest pgtype.Timestamptz
	if err := b.pool.QueryRow(ctx, b.qStats).Scan(&s.Pending, &s.Due, &s.Parked, &oldest); err != nil {
		return outbox.Stats{}, b.interpretError(op, err)
	}
	s.OldestDue = timeOf(oldest)
	return s, nil
}

// Parked lists parked entries by ID, after the ID after, at most limit.
// An entry that cannot be published as stored (its headers column does not
// decode, its topic column is empty, its partition column is outside
// 0..Partitions()-1) is listed with what could be read (ID, topic, key,
// payload; nil Headers when they do not decode) and a LastError naming the
// column and the fix, followed by the stored last error when that is
// something else. A negative attempts column reads as 0 and an infinite
// timestamp as the zero time. See [outbox.Inspector].
func (b *Backend) Parked(ctx context.Context, after string, limit int) ([]outbox.Entry, error) {
	const op = "Parked"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("pgoutbox: %s: limit is %d, must be positive: %w", op, limit, outbox.ErrInvalidArgument)
	}
	rows, err := b.pool.Query(ctx, b.qParked, after, limit)
	if err != nil {
		return nil, b.interpretError(op, err)
	}
	defer rows.Close()
	var out []outbox.Entry
	for rows.Next() {
		var (
			e       outbox.Entry
			key     []byte
			headers []byte
			notBef  pgtype.Timestamptz
			created pgtype.Timestamptz
			part    int32
			att     int32
		)
		if err := rows.Scan(&e.ID, &part, &e.Topic, &key, &e.Payload, &headers, &notBef, &att, &e.LastError, &created); err != nil {
			return nil, b.interpretError(op, err)
		}
		e.Key, e.Partition, e.Attempts = string(key), int(part), attemptsOf(att)
		e.NotBefore, e.CreatedAt = timeOf(notBef), timeOf(created)
		c := checkRow(e.Topic, headers, part, b.opts.Partitions)
		e.Headers, e.LastError = c.headers, sqlrow.WithReason(e.LastError, c.reason)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, b.interpretError(op, err)
	}
	return out, nil
}

// Requeue moves parked entries back to pending, due now, attempts reset,
// not deferred, last error and attempt history kept, in one transaction
// of two statements: the first locks the parked rows among ids and reads
// their topic, headers and partition columns; the second requeues those that can be published as
// stored. An entry that cannot (its topic column is empty, its headers column
// does not decode, or its partition column is outside 0..Partitions()-1:
// only a hand-made UPDATE writes such values) stays parked: Requeue
// returns the count of the others with an [*outbox.RequeueRefusedError]
// (wrapping [outbox.ErrNotRequeueable]) whose Refused lists each such
// entry once, in the order of ids, with a reason naming the column and the
// fix. Fix the column by hand and requeue it again, or cancel it. IDs that
// name no parked entry (pending, sent, unknown, or unstorable as text) are
// skipped and not counted. An empty ids does nothing and returns 0, nil;
// Requeue does not keep ids.
//
// A requeued entry is ordered as if appended now: it gets a new seq
// (entries requeued together keep their order among themselves), so it
// comes after the entries of its key appended before, and an earlier entry
// of its key that is failing holds it back. It needs migration 3. Safe
// for concurrent use; after Close it returns [outbox.ErrClosed]. See
// [outbox.Inspector].
func (b *Backend) Requeue(ctx context.Context, ids ...string) (int, error) {
	const op = "Requeue"
	if err := b.checkOpen(op); err != nil {
		return 0, err
	}
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !storableText(id) })
	if len(ids) == 0 {
		return 0, nil
	}
	var n int
	reasons := map[string]string{}
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, b.qRequeueCheck, ids)
		if err != nil {
			return err
		}
		var ok []string
		for rows.Next() {
			var (
				id, topic string
				headers   []byte
				part      int32
			)
			if err := rows.Scan(&id, &topic, &headers, &part); err != nil {
				rows.Close()
				return err
			}
			if c := checkRow(topic, headers, part, b.opts.Partitions); c.reason != "" {
				reasons[id] = c.reason
				continue
			}
			ok = append(ok, id)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(ok) == 0 {
			return nil
		}
		tag, err := tx.Exec(ctx, b.qRequeue, ok, b.names.outbox)
		n = int(tag.RowsAffected())
		return err
	})
	if err != nil {
		return 0, b.interpretError(op, err)
	}
	if len(reasons) == 0 {
		return n, nil
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
	return n, refused
}

// PurgeArchive deletes archived entries sent before the given time by
// calling [Backend.PurgeArchiveBatch] with batchSize until it reports no
// more: each batch is its own short transaction (at most batchSize rows
// of a plain archive, or one whole day partition of a partitioned one),
// so a large purge neither holds locks for long nor keeps an old snapshot
// that blocks vacuum. It stops when a batch reports no more or ctx is
// done, and reports how many rows it deleted. A batch that cannot have
// its lock within Options.ArchiveLockTimeout ends it with an error
// wrapping [ErrArchiveLockTimeout]. A relay with a retention
// (outbox.RelayOptions.ArchiveRetention) does this by itself; this is for
// `outbox purge` and scripts. It is safe to run concurrently with relays
// and with itself.
func (b *Backend) PurgeArchive(ctx context.Context, before time.Time, batchSize int) (int64, error) {
	const op = "PurgeArchive"
	if err := b.checkOpen(op); err != nil {
		return 0, err
	}
	if batchSize <= 0 {
		return 0, fmt.Errorf("pgoutbox: %s: batchSize is %d, must be positive: %w", op, batchSize, outbox.ErrInvalidArgument)
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, more, err := b.PurgeArchiveBatch(ctx, before, batchSize)
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}

// PartitionStats reports the counts, the live lease, the oldest due
// entry's ID and the number of blocked keys (those [Backend.BlockedKeys]
// lists) of every partition in one statement
// (queries/partition_stats.sql), so all of them are read
// at one moment and add up to what [Backend.Stats] reports at that moment:
// per partition, the pending counts come from the due index (an index-only
// scan when the table is vacuumed), the parked ones from the parked rows,
// and the lease from the lease row, judged by the database's clock. A
// partition whose lease row is free or expired has a zero Lease. Its cost
// grows with the number of pending entries, as Stats's does;
// docs/postgres.md has a measurement. Rows whose partition column is
// outside 0..Partitions()-1 are in no partition's counts (Stats counts
// them). See [outbox.PartitionInspector].
func (b *Backend) PartitionStats(ctx context.Context) ([]outbox.PartitionStats, error) {
	const op = "PartitionStats"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	rows, err := b.pool.Query(ctx, b.qPartitionStats, b.opts.Partitions)
	if err != nil {
		return nil, b.interpretError(op, err)
	}
	defer rows.Close()
	out := make([]outbox.PartitionStats, 0, b.opts.Partitions)
	for rows.Next() {
		var (
			s       outbox.PartitionStats
			part    int32
			oldest  pgtype.Timestamptz
			expires pgtype.Timestamptz
			dueID   pgtype.Text
		)
		if err := rows.Scan(&part, &s.Pending, &s.Due, &s.Parked, &oldest, &s.Lease.Owner, &s.Lease.Version, &expires,
			&dueID, &s.BlockedKeys); err != nil {
			return nil, b.interpretError(op, err)
		}
		s.Partition = int(part)
		s.OldestDue, s.OldestDueID = timeOf(oldest), dueID.String
		if s.Lease.Owner != "" {
			s.Lease.Partition, s.Lease.Expires = s.Partition, expires.Time
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, b.interpretError(op, err)
	}
	return out, nil
}

// Lookup returns the pending or parked entry with the given ID in one
// statement by primary key (queries/lookup.sql). DueAt is the entry's next
// attempt time on the database's clock (its NotBefore or append time, or
// the retry time MarkFailed stored), zero when it is parked. An ID no
// entry can have (one holding a NUL byte or invalid UTF-8, which
// PostgreSQL text cannot store) is not found without a query. A stored
// entry that cannot be published as stored (headers that do not decode,
// an empty topic, a partition outside 0..Partitions()-1, which no relay
// fetches) is returned, not an error, with what could be read and a
// LastError naming the column and the fix, as [Backend.Parked] does. A
// negative attempts column reads as 0 and an infinite timestamp as the
// zero time (so a pending entry whose next_at is 'infinity' has a zero
// DueAt). History is the attempt history MarkFailed kept (oldest first)
// and Deferred reports a pending entry an open breaker deferred. See
// [outbox.Looker].
func (b *Backend) Lookup(ctx context.Context, id string) (outbox.EntryInfo, error) {
	const op = "Lookup"
	if err := b.checkOpen(op); err != nil {
		return outbox.EntryInfo{}, err
	}
	notFound := fmt.Errorf("pgoutbox: %s: no pending or parked entry has ID %q (never appended, already sent or cancelled): %w", op, id, outbox.ErrNotFound)
	if !storableText(id) {
		return outbox.EntryInfo{}, notFound
	}
	var r entryRow
	err := b.pool.QueryRow(ctx, b.qLookup, id).Scan(r.targets()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return outbox.EntryInfo{}, notFound
	}
	if err != nil {
		return outbox.EntryInfo{}, b.interpretError(op, err)
	}
	return r.info(b.opts.Partitions), nil
}

// storableText reports whether PostgreSQL text can hold s: valid UTF-8
// without NUL bytes. A parameter that is not is refused by the server, so
// a lookup by such an ID would fail instead of finding nothing.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
