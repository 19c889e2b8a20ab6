package pgoutbox

import (
	"context"
	"errors"
	"fmt"
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
// See [outbox.Inspector].
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
	if oldest.Valid {
		s.OldestDue = oldest.Time
	}
	return s, nil
}

// Parked lists parked entries by ID, after the ID after, at most limit.
// An entry whose headers column does not decode is listed with nil
// Headers and LastError saying so (the reason FindPendingBatch parks such
// an entry with, followed by the stored last error when that differs).
// See [outbox.Inspector].
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
			part    int32
			att     int32
		)
		if err := rows.Scan(&e.ID, &part, &e.Topic, &key, &e.Payload, &headers, &notBef, &att, &e.LastError, &e.CreatedAt); err != nil {
			return nil, b.interpretError(op, err)
		}
		e.Key, e.Partition, e.Attempts = string(key), int(part), int(att)
		if notBef.Valid {
			e.NotBefore = notBef.Time
		}
		if e.Headers, err = DecodeHeaders(headers); err != nil {
			e.LastError = withCorruptHeaders(e.LastError, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, b.interpretError(op, err)
	}
	return out, nil
}

// Requeue moves parked entries back to pending, due now, attempts reset
// and last error kept, in one statement. An entry whose headers column
// does not decode is requeued like any other and parked again, with the
// same reason, by the next FindPendingBatch that reads it. A requeued entry is ordered as if
// appended now: it gets a new seq (entries requeued together keep their
// order among themselves), so it comes after the entries of its key
// appended before, and an earlier entry of its key that is failing holds
// it back. It needs migration 3. See [outbox.Inspector].
func (b *Backend) Requeue(ctx context.Context, ids ...string) (int, error) {
	const op = "Requeue"
	if err := b.checkOpen(op); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	tag, err := b.pool.Exec(ctx, b.qRequeue, ids, b.names.outbox)
	if err != nil {
		return 0, b.interpretError(op, err)
	}
	return int(tag.RowsAffected()), nil
}

// PurgeArchive deletes archived entries sent before the given time, in
// batches of at most batchSize rows, each batch its own short statement
// (and transaction), so a large purge neither holds locks for long nor
// keeps an old snapshot that blocks vacuum. It stops when a batch deletes
// fewer than batchSize rows or ctx is done, and reports how many rows it
// deleted. Run it periodically (e.g. hourly) when Options.Archive is set;
// it is safe to run concurrently with relays and with itself.
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
		tag, err := b.pool.Exec(ctx, b.qPurge, before, batchSize)
		if err != nil {
			return total, b.interpretError(op, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batchSize) {
			return total, nil
		}
	}
}

// PartitionStats reports the counts and the live lease of every partition
// in one statement (queries/partition_stats.sql), so all of them are read
// at one moment and add up to what [Backend.Stats] reports at that moment:
// per partition, the pending counts come from the due index (an index-only
// scan when the table is vacuumed), the parked ones from the parked rows,
// and the lease from the lease row, judged by the database's clock. A
// partition whose lease row is free or expired has a zero Lease. Its cost
// grows with the number of pending entries, as Stats's does;
// docs/postgres.md has a measurement. See [outbox.PartitionInspector].
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
		)
		if err := rows.Scan(&part, &s.Pending, &s.Due, &s.Parked, &oldest, &s.Lease.Owner, &s.Lease.Version, &expires); err != nil {
			return nil, b.interpretError(op, err)
		}
		s.Partition = int(part)
		if oldest.Valid {
			s.OldestDue = oldest.Time
		}
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
// entry whose headers do not decode is returned with nil Headers and
// LastError saying what is wrong with the column, as [Backend.Parked]
// does, not an error. See [outbox.Looker].
func (b *Backend) Lookup(ctx context.Context, id string) (outbox.EntryInfo, error) {
	const op = "Lookup"
	if err := b.checkOpen(op); err != nil {
		return outbox.EntryInfo{}, err
	}
	notFound := fmt.Errorf("pgoutbox: %s: no pending or parked entry has ID %q (never appended, already sent or cancelled): %w", op, id, outbox.ErrNotFound)
	if !storableText(id) {
		return outbox.EntryInfo{}, notFound
	}
	var (
		info    = outbox.EntryInfo{Entry: outbox.Entry{ID: id}}
		part    int32
		att     int32
		key     []byte
		headers []byte
		notBef  pgtype.Timestamptz
		nextAt  time.Time
	)
	err := b.pool.QueryRow(ctx, b.qLookup, id).Scan(&part, &info.Topic, &key, &info.Payload, &headers, &notBef,
		&att, &info.LastError, &info.CreatedAt, &info.Parked, &nextAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return outbox.EntryInfo{}, notFound
	}
	if err != nil {
		return outbox.EntryInfo{}, b.interpretError(op, err)
	}
	if info.Headers, err = DecodeHeaders(headers); err != nil {
		info.LastError = withCorruptHeaders(info.LastError, err)
	}
	info.Key, info.Partition, info.Attempts = string(key), int(part), int(att)
	if notBef.Valid {
		info.NotBefore = notBef.Time
	}
	if !info.Parked {
		info.DueAt = nextAt
	}
	return info, nil
}

// storableText reports whether PostgreSQL text can hold s: valid UTF-8
// without NUL bytes. A parameter that is not is refused by the server, so
// a lookup by such an ID would fail instead of finding nothing.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
