package mysqloutbox

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/outboxrelay/outbox"
)

// FindPendingBatch returns up to limit due entries of lease.Partition in
// one statement (queries/find_pending_batch.sql), fenced by the lease: when
// lease.Owner no longer holds the partition at lease.Version, or the lease
// expired by the server's clock, it returns an error wrapping
// [outbox.ErrLeaseLost]. The partition lease is the claim: no row is
// written, so a fetch is a read, and the lease's unfinished entries are
// returned again by its next fetch (the relay finishes a batch first).
// Entries come in due order (next_at, then append order); an entry with a
// key is left out while an earlier entry of its partition and key was
// attempted or deferred and is still pending, while the outbox is held
// ([Backend.Hold]) or its partition paused, and while its topic, or an
// earlier pending entry of its key, is paused.
//
// A row that cannot be published as stored is parked, not returned, as
// [Backend.FetchBatch] does; FindPendingBatch does not report those parks
// nor count them against limit (after a round of only parks it reads up
// to limit entries again). Safe for concurrent use; after Close it
// returns [outbox.ErrClosed]. See [outbox.Store.FindPendingBatch].
func (b *Backend) FindPendingBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.Entry, error) {
	batch, err := b.fetchBatch(ctx, "FindPendingBatch", lease, limit, false, nil)
	return batch.Entries, err
}

// FetchBatch is [Backend.FindPendingBatch] that also reports the rows it
// parked (see [outbox.BatchFetcher]). A row whose headers column does not
// decode, or whose topic column is empty (both only a hand-made UPDATE
// writes), is not returned: it is parked in the store, fenced by the lease
// like [Backend.MarkFailed] (attempts + 1, the reason, naming the column
// and the fix, as its last error), and reported in Batch.Parked with its
// ID, topic and key, in the order the fetch read them; the rest of the
// batch is returned, so such a row never stalls its partition, and the
// entries of its key behind it are released as by any park. A row is
// reported by the call that parked it only, and entries and parks
// together are at most limit. With a lost lease nothing is parked and the
// error wraps [outbox.ErrLeaseLost]. When every row read was parked and
// fewer than limit were, the fetch runs again for the rest of the limit
// (at most maxCorruptRounds times), so that a run of such rows does not
// read as an empty partition. A negative attempts column reads as 0. Safe
// for concurrent use; after Close it returns [outbox.ErrClosed].
func (b *Backend) FetchBatch(ctx context.Context, lease outbox.Lease, limit int) (outbox.Batch, error) {
	return b.fetchBatch(ctx, "FetchBatch", lease, limit, true, nil)
}

// FetchNext is [Backend.FetchBatch] while inFlight, the lease's
// unfinished claims, are still in flight (see [outbox.Prefetcher]): the
// same statement leaves their IDs out (passed as one JSON array; they are
// still pending, so one that was attempted keeps holding back its key),
// and the batch is made of the entries behind them. A never-attempted
// entry of inFlight holds back nothing. Safe for concurrent use; after
// Close it returns [outbox.ErrClosed].
func (b *Backend) FetchNext(ctx context.Context, lease outbox.Lease, limit int, inFlight []outbox.Entry) (outbox.Batch, error) {
	except := make([]string, len(inFlight))
	for i := range inFlight {
		except[i] = inFlight[i].ID
	}
	return b.fetchBatch(ctx, "FetchNext", lease, limit, true, except)
}

// maxCorruptRounds bounds how often one fetch runs again after a round in
// which every row read was parked.
const maxCorruptRounds = 10

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

// fetchedRow is one row of the fetch statement.
type fetchedRow struct {
	seq, nextAt                    sql.NullInt64
	id, topic, lastError           sql.NullString
	key, headers                   []byte
	payload                        []byte
	notBefore, attempts, createdAt sql.NullInt64
}

// findPending runs the fetch statement once. It returns the publishable
// entries in order and the rows that cannot be published as stored (to
// park), in the order read.
func (b *Backend) findPending(ctx context.Context, op string, lease outbox.Lease, limit int, except []string) ([]outbox.Entry, []outbox.CorruptEntry, error) {
	stmt, args := b.relay.find, []any{lease.Partition}
	if except != nil {
		stmt, args = b.relay.findNext, append(args, jsonArg(except))
	}
	args = append(append(args, limit), leaseArgs(lease)...)
	rows, err := stmt.QueryContext(ctx, args...)
	if err != nil {
		return nil, nil, b.relayErr(op, err)
	}
	defer rows.Close()
	leaseOK := false
	var out []outbox.Entry
	var corrupt []outbox.CorruptEntry
	type position struct{ next, seq int64 }
	var order []position
	for rows.Next() {
		leaseOK = true
		var r fetchedRow
		if err := rows.Scan(&r.seq, &r.nextAt, &r.id, &r.topic, &r.key, &r.payload, &r.headers,
			&r.notBefore, &r.attempts, &r.lastError, &r.createdAt); err != nil {
			return nil, nil, b.relayErr(op, err)
		}
		if !r.id.Valid { // the lease holds, nothing is due
			continue
		}
		e := outbox.Entry{ID: r.id.String, Topic: r.topic.String, Key: string(r.key), Payload: r.payload,
			Partition: lease.Partition, Attempts: attemptsOf(r.attempts.Int64), LastError: r.lastError.String,
			CreatedAt: fromMicros(r.createdAt.Int64)}
		if r.notBefore.Valid {
			e.NotBefore = fromMicros(r.notBefore.Int64)
		}
		c := checkRow(e.Topic, r.headers, int64(lease.Partition), 0)
		if c.reason != "" {
			corrupt = append(corrupt, outbox.CorruptEntry{ID: e.ID, Topic: e.Topic, Key: e.Key, Reason: c.reason})
			continue
		}
		e.Headers = c.headers
		out = append(out, e)
		order = append(order, position{r.nextAt.Int64, r.seq.Int64})
	}
	if err := rows.Err(); err != nil {
		return nil, nil, b.relayErr(op, err)
	}
	if !leaseOK {
		return nil, nil, fenceLost(op, lease)
	}
	// The derived table is read in index order, so this sort finds the
	// rows in order already; the SQL standard does not promise that order
	// through the join, so it is checked here rather than assumed.
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(x, y int) int {
		if c := cmp.Compare(order[x].next, order[y].next); c != 0 {
			return c
		}
		return cmp.Compare(order[x].seq, order[y].seq)
	})
	sorted := make([]outbox.Entry, len(out))
	for i, j := range idx {
		sorted[i] = out[j]
	}
	return sorted, corrupt, nil
}

// parkCorrupt parks the rows findPending could not return, in one
// statement fenced by the lease (queries/park_corrupt.sql), and returns
// those it parked, in the given order. When it changed fewer rows than
// it was given (a row cancelled or sent meanwhile), a second query reads
// which of them are parked with their reason (queries/parked_ids.sql).
func (b *Backend) parkCorrupt(ctx context.Context, op string, lease outbox.Lease, corrupt []outbox.CorruptEntry) ([]outbox.CorruptEntry, error) {
	pairs := make([][2]string, len(corrupt))
	for i, c := range corrupt {
		c.Reason = cleanError(c.Reason)
		corrupt[i] = c
		pairs[i] = [2]string{c.ID, c.Reason}
	}
	arg := jsonArg(pairs)
	res, err := b.relay.parkCorrupt.ExecContext(ctx, append([]any{arg}, leaseArgs(lease)...)...)
	if err != nil {
		return nil, b.relayErr(op, fmt.Errorf("parking %d entries that cannot be published as stored: %w", len(corrupt), err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, b.relayErr(op, err)
	}
	if n == int64(len(corrupt)) {
		return corrupt, nil
	}
	if err := b.checkLease(ctx, op, lease); err != nil {
		return nil, err
	}
	return b.parkedOf(ctx, op, lease.Partition, arg, corrupt)
}

// parkedOf returns the entries of corrupt that are parked with their
// reason, in order.
func (b *Backend) parkedOf(ctx context.Context, op string, partition int, arg string, corrupt []outbox.CorruptEntry) ([]outbox.CorruptEntry, error) {
	rows, err := b.db.QueryContext(ctx, b.relay.parkedIDs, arg, partition)
	if err != nil {
		return nil, b.relayErr(op, err)
	}
	defer rows.Close()
	parked := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, b.relayErr(op, err)
		}
		parked[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, b.relayErr(op, err)
	}
	out := make([]outbox.CorruptEntry, 0, len(parked))
	for _, c := range corrupt {
		if parked[c.ID] {
			out = append(out, c)
		}
	}
	return out, nil
}

var (
	_ outbox.BatchFetcher = (*Backend)(nil)
	_ outbox.Prefetcher   = (*Backend)(nil)
)
