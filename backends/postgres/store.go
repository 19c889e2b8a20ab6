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
// also checks the lease. Eligible: not held back by an earlier entry of
// its key that was attempted or deferred, or that is of a paused topic,
// and not of a paused topic itself; a held outbox or a paused partition
// returns nothing (see [Backend.PauseTopic] and docs/postgres.md,
// "Operators", for the cost of a pause). It writes nothing: the partition lease is the
// claim, so entries it returns are invisible to every other lease until
// this one ends, and come back at once, unchanged and in order, to the
// next holder. Nothing marks an entry as handed out, so the same lease is
// handed its unfinished entries again by its next fetch (the SPI allows it:
// the relay finishes every batch before fetching the next, or names it to
// [Backend.FetchNext]). See
// [outbox.Store.FindPendingBatch].
//
// A row that cannot be published as stored is parked, not returned, as
// [Backend.FetchBatch] does; FindPendingBatch does not report those parks
// nor count them against limit (after a round of only parks it reads up
// to limit entries again).
func (b *Backend) FindPendingBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.Entry, error) {
	batch, err := b.fetchBatch(ctx, "FindPendingBatch", lease, limit, false, nil)
	return batch.Entries, err
}

// FetchBatch is [Backend.FindPendingBatch] that also reports the rows it
// parked (see [outbox.BatchFetcher]). A row whose headers column does not
// decode (see [DecodeHeaders]) or whose topic column is empty (both only a
// hand-made UPDATE writes) is not returned: it is parked in the store,
// fenced by the lease like [Backend.MarkFailed] (attempts + 1, the reason,
// naming the column and the fix, as its last error), and reported in
// Batch.Parked with its ID, topic and key, in the order the fetch read
// them; the rest of the batch is returned, so such a row never stalls its
// partition, and entries of its key behind it are released as by any
// park. A row is reported by the call that parked it only, and entries
// and parks together are at most limit. With a lost lease nothing is
// parked and the error wraps [outbox.ErrLeaseLost]. When every row read
// was parked and fewer than limit were, the fetch is run again for the
// rest of the limit (at most maxCorruptRounds times), so that a run of
// such rows does not read as an empty partition. A negative attempts
// column reads as 0, and 'infinity' in a timestamp column as the zero
// time (see docs/postgres.md, "Corrupt rows"). Safe for concurrent use;
// after Close it returns [outbox.ErrClosed].
func (b *Backend) FetchBatch(ctx context.Context, lease outbox.Lease, limit int) (outbox.Batch, error) {
	return b.fetchBatch(ctx, "FetchBatch", lease, limit, true, nil)
}

// FetchNext is [Backend.FetchBatch] while inFlight, the lease's
// unfinished claims, are still in flight (see [outbox.Prefetcher]): the
// same statement leaves their IDs out (they are still pending, so one that
// was attempted keeps holding back its key), and the batch is made of the
// entries behind them. A never-attempted entry of inFlight holds back
// nothing. Safe for concurrent use; after Close it returns
// [outbox.ErrClosed].
func (b *Backend) FetchNext(ctx context.Context, lease outbox.Lease, limit int, inFlight []outbox.Entry) (outbox.Batch, error) {
	except := make([]string, len(inFlight))
	for i := range inFlight {
		except[i] = inFlight[i].ID
	}
	return b.fetchBatch(ctx, "FetchNext", lease, limit, true, except)
}

// fetchBatch serves FetchBatch, FetchNext (except are the IDs it leaves
// out, non-nil) and FindPendingBatch. bounded counts the parks against
// limit (FetchBatch reports them); FindPendingBatch, which drops them,
// reads up to limit entries again after a round of parks only.
func (b *Backend) fetchBatch(ctx context.Context, op string, lease outbox.Lease, limit int, bounded bool, except []string) (outbox.Batch, error) {
	if err := b.checkOpen(op); err != nil {
		return outbox.Batch{}, err
	}
	if err := outbox.CheckFetch(b.opts.Partitions, lease, limit); err != nil {
		return outbox.Batch{}, argErr(op, err)
	}
	var parked []outbox.CorruptEntry
	for round := 1; ; round++ {
		n := limit
		if bounded {
			n -= len(parked)
		}
		out, corrupt, err := b.findPending(ctx, op, lease, n, except)
		if err != nil {
			return outbox.Batch{}, err
		}
		if len(corrupt) == 0 {
			return outbox.Batch{Entries: out, Parked: parked}, nil
		}
		done, err := b.parkCorrupt(ctx, op, lease, corrupt)
		if err != nil {
			return outbox.Batch{}, err
		}
		parked = append(parked, done...)
		if len(out) > 0 || round == maxCorruptRounds || (bounded && len(parked) >= limit) {
			return outbox.Batch{Entries: out, Parked: parked}, nil
		}
	}
}

// maxCorruptRounds bounds how often one FetchBatch fetches again after a
// batch in which every row was parked.
const maxCorruptRounds = 10

// parkCorrupt parks the rows findPending could not return, in one
// statement fenced by the lease (queries/park_corrupt.sql), and returns
// those it parked (a row cancelled meanwhile is not), in the given order.
func (b *Backend) parkCorrupt(ctx context.Context, op string, lease outbox.Lease, corrupt []outbox.CorruptEntry) ([]outbox.CorruptEntry, error) {
	ids, reasons := make([]string, len(corrupt)), make([]string, len(corrupt))
	for i, c := range corrupt {
		ids[i], reasons[i] = c.ID, cleanError(c.Reason)
	}
	var held bool
	var parked []string
	if err := b.pool.QueryRow(ctx, b.qParkCorrupt, lease.Partition, lease.Owner, lease.Version, ids, reasons).Scan(&held, &parked); err != nil {
		return nil, b.interpretError(op, fmt.Errorf("parking %d entries that cannot be published as stored: %w", len(corrupt), err))
	}
	if !held {
		return nil, leaseLost(op, lease)
	}
	out := make([]outbox.CorruptEntry, 0, len(parked))
	for _, c := range corrupt {
		if slices.Contains(parked, c.ID) {
			out = append(out, c)
		}
	}
	return out, nil
}

// findPending runs the fetch statement once. It returns the publishable
// entries in order and the rows that cannot be published as stored (to
// park), in the order read.
func (b *Backend) findPending(ctx context.Context, op string, lease outbox.Lease, limit int, except []string) ([]outbox.Entry, []outbox.CorruptEntry, error) {
	q, args := b.qFind, []any{lease.Partition, lease.Owner, lease.Version, limit}
	if except != nil {
		q, args = b.qFindNext, append(args, except)
	}
	rows, err := b.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, nil, b.interpretError(op, err)
	}
	defer rows.Close()
	leaseOK := false
	var out []outbox.Entry
	var corrupt []outbox.CorruptEntry
	type position struct {
		next time.Time
		seq  int64
	}
	var order []position
	var where map[string]pgtype.TID
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
		var ctid pgtype.TID
		if err := rows.Scan(&pos.seq, &pos.next, &id, &topic, &key, &e.Payload, &headers, &notBef, &attempts, &lastErr, &created, &ctid); err != nil {
			return nil, nil, b.interpretError(op, err)
		}
		if !id.Valid { // the lease holds, nothing is due
			continue
		}
		e.ID, e.Topic, e.Key, e.Partition = id.String, topic.String, string(key), lease.Partition
		e.Attempts, e.LastError = attemptsOf(attempts.Int32), lastErr.String
		e.CreatedAt, e.NotBefore = timeOf(created), timeOf(notBef)
		c := checkRow(e.Topic, headers, int32(lease.Partition), 0)
		if c.reason != "" {
			corrupt = append(corrupt, outbox.CorruptEntry{ID: e.ID, Topic: e.Topic, Key: e.Key, Reason: c.reason})
			continue
		}
		e.Headers = c.headers
		out = append(out, e)
		order = append(order, position{pos.next.Time, pos.seq.Int64})
		if ctid.Valid {
			if where == nil {
				where = make(map[string]pgtype.TID, limit)
			}
			where[e.ID] = ctid
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, b.interpretError(op, err)
	}
	if !leaseOK {
		return nil, nil, leaseLost(op, lease)
	}
	b.fetched[lease.Partition].Remember(lease, where)
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
// delete. With Options.Archive, when the statement fails because the
// archive changed form since New (see [PartitionArchive]), the backend
// reads the form again and the next call uses the statement for it. See
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
	// The rows the partition's last fetch under lease returned are found by
	// their ctids (queries/mark_sent_tid.sql) instead of one primary-key
	// descent per ID, about half the cost; a ctid is only a hint (a row
	// updated or deleted since has another, or none), so the statement
	// also deletes by ID whatever it did not find there.
	var ctids []pgtype.TID
	var known []string
	b.fetched[lease.Partition].Each(lease, ids, func(id string, t pgtype.TID, ok bool) {
		if ok {
			ctids, known = append(ctids, t), append(known, id)
		}
	})
	shape := b.archive.Load()
	var err error
	if len(ctids) > 0 {
		err = b.fenced(ctx, op, lease, shape.markSentTID, lease.Partition, lease.Owner, lease.Version, ids, ctids, known)
	} else {
		err = b.fenced(ctx, op, lease, shape.markSent, lease.Partition, lease.Owner, lease.Version, ids)
	}
	if err != nil {
		b.redetectArchive(ctx, err)
	}
	return err
}

// MarkFailed records the failures in one statement (an UPDATE joined to
// the unnested failures) fenced like [Backend.MarkSent]. A failure's new
// due time is computed by the database: now() plus Delay, passed in whole
// microseconds (rounded away from zero, so a positive Delay never comes
// early and a negative one stays in the past). Errors longer than 4096
// bytes are truncated; invalid UTF-8 and NUL bytes in them are replaced.
// Each failure that is not Deferred appends an [outbox.Attempt] to the
// entry's history column (the database's now(), the error as stored,
// lease.Owner), keeping the last [outbox.MaxAttemptHistory]. A Deferred
// failure sets only the due time and the deferred column, which makes the
// entry hold back the later entries of its key until it is attempted,
// sent, parked or requeued; any other failure clears it. A failure with
// both Park and Deferred fails the call with [outbox.ErrInvalidArgument]
// before the statement runs. See [outbox.Store.MarkFailed].
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
	delays, park, deferred := make([]int64, n), make([]bool, n), make([]bool, n)
	for i, f := range failures {
		if f.Park && f.Deferred {
			return fmt.Errorf("pgoutbox: %s: failure %d (entry %q) has both Park and Deferred set; a deferred entry was not attempted, so it cannot be parked: set one of them: %w",
				op, i, f.ID, outbox.ErrInvalidArgument)
		}
		ids[i], errs[i], delays[i], park[i], deferred[i] = f.ID, cleanError(f.Error), delayMicros(f.Delay), f.Park, f.Deferred
	}
	return b.fenced(ctx, op, lease, b.qMarkFailed, lease.Partition, lease.Owner, lease.Version, ids, errs, delays, park, deferred)
}

// cleanError makes s storable as text and bounds its size.
func cleanError(s string) string { return cutText(s, maxErrorLen) }

// cutText makes s storable as text (NUL bytes and invalid UTF-8 replaced
// by U+FFFD) and cuts it to at most n bytes, at a character boundary.
func cutText(s string, n int) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "")
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
