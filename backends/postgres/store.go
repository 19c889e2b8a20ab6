package pgoutbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxrelay/outbox"
)

// AcquireLease takes or extends the lease of partition in one statement:
// an UPDATE of the partition's lease row (created free by migration 004)
// whose condition (free, expired or held by owner) is checked before the
// row is locked, so an acquire that fails because another owner holds the
// lease takes no lock and never waits for the holder's fenced writes. A
// missing row (removed by hand) is inserted. See
// [outbox.Store.AcquireLease]. owner must also be valid UTF-8 without NUL
// bytes (PostgreSQL text), else the error wraps [outbox.ErrInvalidArgument].
func (b *Backend) AcquireLease(ctx context.Context, partition int, owner string, ttl time.Duration) (outbox.Lease, error) {
	const op = "AcquireLease"
	if err := b.checkOpen(op); err != nil {
		return outbox.Lease{}, err
	}
	if err := outbox.CheckAcquire(b.opts.Partitions, partition, owner, ttl); err != nil {
		return outbox.Lease{}, argErr(op, err)
	}
	if err := checkOwner(owner); err != nil {
		return outbox.Lease{}, argErr(op, err)
	}
	l := outbox.Lease{Partition: partition, Owner: owner}
	err := b.pool.QueryRow(ctx, b.qAcquire, partition, owner, micros(ttl)).Scan(&l.Version, &l.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return outbox.Lease{}, fmt.Errorf("pgoutbox: %s: partition %d: %w", op, partition, outbox.ErrLeaseHeld)
	}
	if err != nil {
		return outbox.Lease{}, b.interpretError(op, err)
	}
	return l, nil
}

// RenewLease extends a held, unexpired lease (compare-and-renew, one
// statement). See [outbox.Store.RenewLease].
func (b *Backend) RenewLease(ctx context.Context, lease outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	const op = "RenewLease"
	if err := b.checkOpen(op); err != nil {
		return outbox.Lease{}, err
	}
	if err := outbox.CheckRenew(b.opts.Partitions, lease, ttl); err != nil {
		return outbox.Lease{}, argErr(op, err)
	}
	err := b.pool.QueryRow(ctx, b.qRenew, lease.Partition, lease.Owner, lease.Version, micros(ttl)).Scan(&lease.Expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return outbox.Lease{}, leaseLost(op, lease)
	}
	if err != nil {
		return outbox.Lease{}, b.interpretError(op, err)
	}
	return lease, nil
}

// ReleaseLease frees the partition when lease still holds it
// (compare-and-free, one statement). The lease row stays, marked free, so
// versions keep growing. See [outbox.Store.ReleaseLease].
func (b *Backend) ReleaseLease(ctx context.Context, lease outbox.Lease) error {
	const op = "ReleaseLease"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if err := outbox.CheckPartition(b.opts.Partitions, lease.Partition); err != nil {
		return argErr(op, err)
	}
	_, err := b.pool.Exec(ctx, b.qReleaseLease, lease.Partition, lease.Owner, lease.Version)
	return b.interpretError(op, err)
}

// FindPendingBatch returns up to limit due, eligible entries of
// lease.Partition in (next attempt, append) order, in one statement that
// also checks the lease. It writes nothing: the partition lease is the
// claim, so entries it returns are invisible to every other lease until
// this one ends, and come back at once, unchanged and in order, to the
// next holder. Nothing marks an entry as handed out, so the same lease is
// handed its unfinished entries again by its next fetch (the SPI allows it:
// the relay finishes every batch before fetching the next). See
// [outbox.Store.FindPendingBatch].
//
// A row whose headers column does not decode (see [DecodeHeaders]) is not
// returned: it is parked in the store, fenced by the lease like
// [Backend.MarkFailed] (attempts + 1, the reason, naming the column, as its
// last error), and the rest of the batch is returned, so one corrupt row
// never stalls its partition. When every row read was corrupt, the fetch
// is run again (at most maxCorruptRounds times) so that a run of corrupt
// rows does not read as an empty partition.
func (b *Backend) FindPendingBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.Entry, error) {
	const op = "FindPendingBatch"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	if err := outbox.CheckFetch(b.opts.Partitions, lease, limit); err != nil {
		return nil, argErr(op, err)
	}
	for round := 1; ; round++ {
		out, corrupt, err := b.findPending(ctx, op, lease, limit)
		if err != nil {
			return nil, err
		}
		if len(corrupt) == 0 {
			return out, nil
		}
		if err := b.MarkFailed(ctx, lease, corrupt); err != nil {
			return nil, fmt.Errorf("pgoutbox: %s: parking %d entries whose headers column does not decode: %w", op, len(corrupt), err)
		}
		if len(out) > 0 || round == maxCorruptRounds {
			return out, nil
		}
	}
}

// maxCorruptRounds bounds how often one FindPendingBatch fetches again
// after a batch in which every row was corrupt (and has been parked).
const maxCorruptRounds = 10

// findPending runs the fetch statement once. It returns the decodable
// entries in order and, as parking failures, the rows whose headers do not
// decode.
func (b *Backend) findPending(ctx context.Context, op string, lease outbox.Lease, limit int) ([]outbox.Entry, []outbox.Failure, error) {
	rows, err := b.pool.Query(ctx, b.qFind, lease.Partition, lease.Owner, lease.Version, limit)
	if err != nil {
		return nil, nil, b.interpretError(op, err)
	}
	defer rows.Close()
	leaseOK := false
	var out []outbox.Entry
	var corrupt []outbox.Failure
	type position struct {
		next time.Time
		seq  int64
	}
	var order []position
	for rows.Next() {
		leaseOK = true
		var (
			id       pgtype.Text
			e        outbox.Entry
			key      []byte
			headers  []byte
			notBef   pgtype.Timestamptz
			attempts pgtype.Int4
			lastErr  pgtype.Text
			created  pgtype.Timestamptz
			topic    pgtype.Text
			pos      struct {
				seq  pgtype.Int8
				next pgtype.Timestamptz
			}
		)
		if err := rows.Scan(&pos.seq, &pos.next, &id, &topic, &key, &e.Payload, &headers, &notBef, &attempts, &lastErr, &created); err != nil {
			return nil, nil, b.interpretError(op, err)
		}
		if !id.Valid { // the lease holds, nothing is due
			continue
		}
		e.ID, e.Topic, e.Key, e.Partition = id.String, topic.String, string(key), lease.Partition
		e.Attempts, e.LastError = int(attempts.Int32), lastErr.String
		e.CreatedAt = created.Time
		if notBef.Valid {
			e.NotBefore = notBef.Time
		}
		if e.Headers, err = DecodeHeaders(headers); err != nil {
			corrupt = append(corrupt, outbox.Failure{ID: e.ID, Error: corruptHeadersReason(err), Park: true})
			continue
		}
		out = append(out, e)
		order = append(order, position{pos.next.Time, pos.seq.Int64})
	}
	if err := rows.Err(); err != nil {
		return nil, nil, b.interpretError(op, err)
	}
	if !leaseOK {
		return nil, nil, leaseLost(op, lease)
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int {
		if c := order[a].next.Compare(order[b].next); c != 0 {
			return c
		}
		return cmp.Compare(order[a].seq, order[b].seq)
	})
	sorted := make([]outbox.Entry, len(out))
	for i, j := range idx {
		sorted[i] = out[j]
	}
	return sorted, corrupt, nil
}

// MarkSent deletes (or, with Options.Archive, archives) the entries in one
// statement fenced by the lease: the lease row is locked FOR SHARE by the
// same statement, so a takeover cannot slip in between the check and the
// delete. See [outbox.Store.MarkSent].
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
	return b.fenced(ctx, op, lease, b.qMarkSent, lease.Partition, lease.Owner, lease.Version, ids)
}

// MarkFailed records the failures in one statement (an UPDATE joined to
// the unnested failures) fenced like [Backend.MarkSent]. A failure's new
// due time is computed by the database: now() plus Delay, passed in whole
// microseconds (rounded away from zero, so a positive Delay never comes
// early and a negative one stays in the past). Errors longer than 4096
// bytes are truncated; invalid UTF-8 and NUL bytes in them are replaced.
// See [outbox.Store.MarkFailed].
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
	n := len(failures)
	ids, errs := make([]string, n), make([]string, n)
	delays, park := make([]int64, n), make([]bool, n)
	for i, f := range failures {
		ids[i], errs[i], delays[i], park[i] = f.ID, cleanError(f.Error), delayMicros(f.Delay), f.Park
	}
	return b.fenced(ctx, op, lease, b.qMarkFailed, lease.Partition, lease.Owner, lease.Version, ids, errs, delays, park)
}

// cleanError makes s storable as text and bounds its size.
func cleanError(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
	if len(s) > maxErrorLen {
		s = strings.ToValidUTF8(s[:maxErrorLen], "")
	}
	return s
}

// fenced runs a statement that reports (lease matched, rows changed).
func (b *Backend) fenced(ctx context.Context, op string, lease outbox.Lease, q string, args ...any) error {
	var held bool
	var n int64
	if err := b.pool.QueryRow(ctx, q, args...).Scan(&held, &n); err != nil {
		return b.interpretError(op, err)
	}
	if !held {
		return leaseLost(op, lease)
	}
	return nil
}

// Release returns unattempted entries to pending. Claims are the lease
// itself and FindPendingBatch changed nothing, so the entries already are
// pending, unchanged and in order: Release only checks, in one statement,
// that the lease still holds, returning an error wrapping
// [outbox.ErrLeaseLost] when it does not. See [outbox.Store.Release].
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
	var held bool
	if err := b.pool.QueryRow(ctx, b.qRelease, lease.Partition, lease.Owner, lease.Version).Scan(&held); err != nil {
		return b.interpretError(op, err)
	}
	if !held {
		return leaseLost(op, lease)
	}
	return nil
}

// checkOwner rejects an owner PostgreSQL text cannot store.
func checkOwner(owner string) error {
	if !validIdent(owner, 1<<20) {
		return fmt.Errorf("owner must be valid UTF-8 without NUL bytes (PostgreSQL text): %w", outbox.ErrInvalidArgument)
	}
	return nil
}
