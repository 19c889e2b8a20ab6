package pgoutbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxrelay/outbox"
)

// Cancel deletes a pending or parked entry in one statement. A relay that
// fetched the entry before may still publish it; once Cancel returns nil
// the entry is never fetched again. Unknown, sent and cancelled IDs give an
// error wrapping [outbox.ErrNotFound]. See [outbox.Canceler].
func (b *Backend) Cancel(ctx context.Context, id string) error {
	const op = "Cancel"
	if err := b.checkOpen(op); err != nil {
		return err
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
			return nil, fmt.Errorf("pgoutbox: %s: entry %q: %w", op, e.ID, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, b.interpretError(op, err)
	}
	return out, nil
}

// Requeue moves parked entries back to pending, due now, attempts reset
// and last error kept, in one statement. A requeued entry is ordered as if
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
