package mysqloutbox

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"github.com/outboxrelay/outbox/internal/sqlrow"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/headercodec"
)

// This file implements the interfaces of moving a live outbox
// (outbox.Exporter, outbox.Importer, outbox.Holder, outbox.Sealer) on the
// hold table, the import counter and the meta row's seal of migration 001.

// ExportBatch returns up to limit entries of lease.Partition, whatever
// their state (due, scheduled, retrying, held back, claimed, parked), with
// their attempt history and deferral, in seq order, the partition's
// append order: imported entries first, in the order imported, then
// appended ones (a requeued entry has the seq of its requeue). One
// read-only statement (queries/export_batch.sql), fenced like
// FindPendingBatch: it returns rows only while the lease is live by the
// server's clock; when it returns none, a second read of the lease row
// tells an empty partition from a lease that is not live, which gives an
// error wrapping [outbox.ErrLeaseLost]. A limit that is not positive gives
// [outbox.ErrInvalidArgument].
//
// A pending row that cannot be published as stored (its topic column is
// empty or its headers column does not decode; only a hand-made UPDATE
// writes such values) is exported parked, with what could be read (nil
// Headers when they do not decode) and a LastError naming the column and
// the fix, as [Backend.Lookup] shows it, so the move carries it on for an
// operator instead of stalling. A parked row is exported as it is (an
// empty topic included: Import stores a parked entry without one), with
// the reason added to its LastError only when its headers do not decode.
// A negative attempts column reads as 0.
//
// The statement walks the primary key (seq) and skips the rows of the
// other partitions, so a call reads about limit × Partitions() rows once
// the exported rows of the partition are removed. Safe for concurrent
// use; after Close it returns [outbox.ErrClosed]. See [outbox.Exporter].
func (b *Backend) ExportBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.EntryInfo, error) {
	const op = "ExportBatch"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	if err := outbox.CheckFetch(b.opts.Partitions, lease, limit); err != nil {
		return nil, argErr(op, err)
	}
	rows, err := b.db.QueryContext(ctx, b.ops.qExport, lease.Partition, lease.Partition, lease.Owner, lease.Version, limit)
	if err != nil {
		return nil, b.opsError(ctx, op, err)
	}
	defer rows.Close()
	var (
		out  []outbox.EntryInfo
		seqs []int64
	)
	for rows.Next() {
		var (
			seq int64
			r   entryRow
		)
		if err := rows.Scan(append([]any{&seq}, r.targets()...)...); err != nil {
			return nil, b.opsError(ctx, op, err)
		}
		out = append(out, exportedInfo(&r, lease.Partition))
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, b.opsError(ctx, op, err)
	}
	if len(out) == 0 {
		var one int
		err := b.db.QueryRowContext(ctx, b.ops.qExportLease, lease.Partition, lease.Owner, lease.Version).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, fenceLost(op, lease)
		}
		if err != nil {
			return nil, b.opsError(ctx, op, err)
		}
		return nil, nil
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(x, y int) int { return cmp.Compare(seqs[x], seqs[y]) })
	sorted := make([]outbox.EntryInfo, len(out))
	for i, j := range idx {
		sorted[i] = out[j]
	}
	return sorted, nil
}

// exportedInfo is a row as ExportBatch reports it.
func exportedInfo(r *entryRow, partition int) outbox.EntryInfo {
	info := outbox.EntryInfo{Entry: outbox.Entry{
		ID: r.id, Topic: r.topic, Key: string(r.key), Payload: r.payload,
		NotBefore: nullTime(r.notBef), Partition: partition,
		Attempts: attemptsOf(r.attempts), LastError: r.lastErr, CreatedAt: nullTime(r.created),
	}, Parked: r.parked, Deferred: r.deferred, History: decodeHistory(r.history)}
	topicCheck := info.Topic
	if info.Parked {
		// A parked entry may have no topic (an import stores one so);
		// it is exported as it is, last error included.
		topicCheck = "-"
	}
	c := checkRow(topicCheck, r.headers, 0, 0)
	info.Headers = c.headers
	if c.reason != "" {
		info.Parked, info.Deferred, info.LastError = true, false, sqlrow.WithReason(info.LastError, c.reason)
	}
	if !info.Parked {
		info.DueAt = nullTime(r.nextAt)
	}
	return info
}

// RemoveExported deletes the entries with the given IDs from
// lease.Partition, whatever their state, and never archives them (with
// Options.Archive too): they were moved, not sent. Each chunk of up to
// 1000 IDs is one transaction that reads the lease row with a shared lock
// (as the relay's fenced writes do, so a takeover waits for it or makes
// it fail) and deletes the rows (queries/remove_exported*.sql). IDs that
// are unknown, already gone or of another partition are ignored. An empty
// ids returns nil without a query. A lease that is not live gives an
// error wrapping [outbox.ErrLeaseLost] and the chunk is not removed (the
// chunks before it are). ids is not retained. See [outbox.Exporter].
func (b *Backend) RemoveExported(ctx context.Context, lease outbox.Lease, ids []string) error {
	const op = "RemoveExported"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	if err := outbox.CheckPartition(b.opts.Partitions, lease.Partition); err != nil {
		return argErr(op, err)
	}
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !validText(id) })
	if len(ids) == 0 {
		ids = []string{""} // still fenced: no stored entry has the empty ID
	}
	for chunk := range slices.Chunk(ids, maxIDsPerStatement) {
		lost := false
		err := b.inTx(ctx, func(tx *sql.Tx) error {
			var one int
			err := tx.QueryRowContext(ctx, b.ops.qRemoveLease, lease.Partition, lease.Owner, lease.Version).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				lost = true
				return nil
			}
			if err != nil {
				return err
			}
			q := strings.Replace(b.ops.qRemoveExported, "{ids}", placeholders(len(chunk)), 1)
			_, err = tx.ExecContext(ctx, q, anyArgs([]any{lease.Partition}, chunk)...)
			return err
		})
		if err != nil {
			return b.opsError(ctx, op, err)
		}
		if lost {
			return fenceLost(op, lease)
		}
	}
	return nil
}

// importColumns is the number of values of one imported row (import.sql).
const importColumns = 15

// maxImportRows and maxImportBytes bound one INSERT of Import: well under
// the 65,535 placeholders of a prepared statement and the server's
// max_allowed_packet (16 MiB on MariaDB, 64 MiB on MySQL by default).
const (
	maxImportRows  = 1000
	maxImportBytes = 4 << 20
)

// skewAllowance is how far ahead of the server's clock the due time of a
// never-attempted entry without NotBefore may be and still count as due:
// the skew between the two stores' clocks.
const skewAllowance = time.Minute

// Import adds entries exported from another outbox, as they were there
// (ID, topic, key, payload, headers, NotBefore, CreatedAt, attempts, last
// error, parked state, due time, the attempt history, its last
// [outbox.MaxAttemptHistory] attempts, and Deferred, which a pending
// entry keeps, so that it holds back its key here too), each to partition
// PartitionOf(Key, Partitions()) as appends place it, and returns how
// many it added. An ID already stored (imported or appended), or repeated
// in the call after its first occurrence, is skipped.
//
// One transaction: it locks the import counter row (Table+"_import") and
// reads it with the server's clock and the hold's since, takes one seq
// per entry from it, inserts the entries in multi-row INSERTs (up to 1000
// rows or 4 MiB each) and counts the rows it inserted. The counter counts
// up from the lowest BIGINT, so in the fetch's (due time, seq) order and
// in the per-key hold-back imported entries come before every appended
// entry (whose seq counts up from 1), among themselves in the order
// imported; concurrent imports take their seqs in turn. An imported entry
// with Attempts > 0 that is not parked holds back the appended entries of
// its key. A due entry (DueAt zero or not after the server's clock; or,
// never attempted and without NotBefore, so due at its source since its
// append, DueAt less than a minute ahead of it: the skew between the two
// clocks) is made due at the earlier of its DueAt and the time the outbox
// was first held (the server's now when it is not held); an entry due
// later keeps its DueAt. A zero CreatedAt is stored as the server's now.
//
// Each entry must have a non-empty ID of at most [outbox.MaxIDLen] bytes
// of valid UTF-8, a topic of at most [outbox.MaxTopicLen] bytes of valid
// UTF-8 (empty only when parked) and a key of at most [outbox.MaxKeyLen]
// bytes; else the call fails with an error wrapping
// [outbox.ErrInvalidEntry] naming the entry, and nothing is added.
// Options.Limits and Options.KeySequence do not apply
// (outbox.HeaderKeySeq headers are stored as given). LastError is stored
// as MarkFailed stores errors (invalid UTF-8 replaced, at most 4096
// bytes). No entries returns 0, nil without a query. It does not notify
// relays (a destination is held while entries are imported). Import does
// not append: it works on a sealed outbox. It does not retain entries.
// Safe for concurrent use; after Close it returns [outbox.ErrClosed]. See
// [outbox.Importer].
func (b *Backend) Import(ctx context.Context, entries []outbox.EntryInfo) (int, error) {
	const op = "Import"
	if err := b.checkOpen(op); err != nil {
		return 0, err
	}
	if len(entries) == 0 {
		return 0, nil
	}
	rows := make([]importRow, len(entries))
	for i, e := range entries {
		if err := checkImported(e); err != nil {
			return 0, fmt.Errorf("%s: %s: %w: entry %d (id %q): %s", pkgName, op, outbox.ErrInvalidEntry, i, e.ID, err)
		}
		r, err := b.importRow(e)
		if err != nil {
			return 0, fmt.Errorf("%s: %s: entry %d (id %q): %w", pkgName, op, i, e.ID, err)
		}
		rows[i] = r
	}
	var added int
	err := b.inTx(ctx, func(tx *sql.Tx) error {
		var (
			first, now int64
			held       sql.NullInt64
		)
		if err := tx.QueryRowContext(ctx, b.ops.qImportSeq).Scan(&first, &now, &held); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, b.ops.qImportBump, len(rows)); err != nil {
			return err
		}
		bound := now
		if held.Valid {
			bound = held.Int64
		}
		for i := range rows {
			rows[i].place(first+int64(i), now, bound)
		}
		for _, batch := range importBatches(rows) {
			if err := b.insertImported(ctx, tx, batch); err != nil {
				return err
			}
		}
		return tx.QueryRowContext(ctx, b.ops.qImportCount, first, first+int64(len(rows))-1).Scan(&added)
	})
	if err != nil {
		return 0, b.opsError(ctx, op, err)
	}
	return added, nil
}

// importRow is one entry as Import stores it; seq, next_at and created_at
// are placed once the server's clock and the counter are read.
type importRow struct {
	seq                 int64
	id, topic, lastErr  string
	part                int
	key, payload, hdrs  []byte
	notBefore           sql.NullInt64
	created, due        int64 // microseconds; 0: unset
	nextAt              int64
	attempts            int
	parked, deferred    bool
	history             sql.NullString
	hasCreated, hasDue  bool
	neverAttemptedNoNBF bool
}

// importRow converts e; the history is encoded as MarkFailed stores it.
func (b *Backend) importRow(e outbox.EntryInfo) (importRow, error) {
	r := importRow{
		id: e.ID, topic: e.Topic, lastErr: cleanError(e.LastError),
		part: outbox.PartitionOf(e.Key, b.opts.Partitions),
		key:  bytesArg(e.Key), payload: e.Payload, hdrs: headercodec.Encode(e.Headers),
		attempts: min(max(e.Attempts, 0), 1<<31-1),
		parked:   e.Parked, deferred: e.Deferred && !e.Parked,
	}
	if !e.NotBefore.IsZero() {
		r.notBefore = sql.NullInt64{Int64: toMicros(e.NotBefore), Valid: true}
	}
	r.hasCreated, r.created = !e.CreatedAt.IsZero(), toMicros(e.CreatedAt)
	r.hasDue, r.due = !e.DueAt.IsZero(), toMicros(e.DueAt)
	r.neverAttemptedNoNBF = r.attempts == 0 && e.NotBefore.IsZero()
	h, ok, err := encodeHistory(e.History)
	if err != nil {
		return r, fmt.Errorf("encoding its attempt history: %w", err)
	}
	r.history = sql.NullString{String: h, Valid: ok}
	return r, nil
}

// place sets the row's seq and its next_at and created_at from the
// server's clock now and the bound a due entry's due time is lowered to
// (microseconds).
func (r *importRow) place(seq, now, bound int64) {
	r.seq = seq
	if !r.hasCreated {
		r.created = now
	}
	isDue := r.parked || !r.hasDue || r.due <= now ||
		(r.neverAttemptedNoNBF && r.due <= now+skewAllowance.Microseconds())
	switch {
	case !isDue:
		r.nextAt = r.due
	case r.hasDue:
		r.nextAt = min(r.due, bound)
	default:
		r.nextAt = bound
	}
}

// size is about what the row adds to the statement, in bytes.
func (r *importRow) size() int {
	return len(r.id) + len(r.topic) + len(r.lastErr) + len(r.key) + len(r.payload) + len(r.hdrs) + len(r.history.String) + 128
}

// importBatches splits rows into the INSERTs of Import.
func importBatches(rows []importRow) [][]importRow {
	var out [][]importRow
	start, bytes := 0, 0
	for i := range rows {
		s := rows[i].size()
		if i > start && (i-start == maxImportRows || bytes+s > maxImportBytes) {
			out = append(out, rows[start:i])
			start, bytes = i, 0
		}
		bytes += s
	}
	return append(out, rows[start:])
}

// importValues is the VALUES tuple of one imported row.
var importValues = "(?, ?, ?, ?, ?, ?, ?, " + datetimeOf("?") + ", " + datetimeOf("?") + ", " + datetimeOf("?") +
	", ?, ?, ?, ?, ?)"

// insertImported inserts rows in one statement.
func (b *Backend) insertImported(ctx context.Context, tx *sql.Tx, rows []importRow) error {
	tuples := make([]string, len(rows))
	args := make([]any, 0, len(rows)*importColumns)
	for i := range rows {
		r := &rows[i]
		tuples[i] = importValues
		state := "pending"
		if r.parked {
			state = "parked"
		}
		var notBefore any
		if r.notBefore.Valid {
			notBefore = r.notBefore.Int64
		}
		var history any
		if r.history.Valid {
			history = r.history.String
		}
		args = append(args, r.seq, r.id, r.part, r.topic, r.key, r.payload, r.hdrs,
			notBefore, r.created, r.nextAt, r.attempts, state, r.lastErr, history, r.deferred)
	}
	// not_before is NULL or a DATETIME(6): TIMESTAMPADD of NULL is NULL.
	q := strings.Replace(b.ops.qImport, "{rows}", strings.Join(tuples, ", "), 1)
	_, err := tx.ExecContext(ctx, q, args...)
	return err
}

// checkImported checks what Import must be able to store of e.
func checkImported(e outbox.EntryInfo) error {
	switch {
	case e.ID == "":
		return errors.New("the ID is empty")
	case len(e.ID) > outbox.MaxIDLen:
		return fmt.Errorf("the ID is %d bytes, the limit is %d", len(e.ID), outbox.MaxIDLen)
	case !validText(e.ID) || strings.ContainsRune(e.ID, 0):
		return errors.New("the ID must be valid UTF-8 without NUL bytes")
	case e.Topic == "" && !e.Parked:
		return errors.New("the topic is empty and the entry is not parked")
	case len(e.Topic) > outbox.MaxTopicLen:
		return fmt.Errorf("the topic is %d bytes, the limit is %d", len(e.Topic), outbox.MaxTopicLen)
	case !validText(e.Topic):
		return errors.New("the topic must be valid UTF-8")
	case len(e.Key) > outbox.MaxKeyLen:
		return fmt.Errorf("the key is %d bytes, the limit is %d", len(e.Key), outbox.MaxKeyLen)
	}
	return nil
}

// Hold holds the outbox in one statement (queries/hold.sql): it creates
// the row of the hold table with the reason and since = the server's
// clock or, when the outbox is held, replaces the reason and keeps since.
// From its commit on, every FindPendingBatch and FetchBatch (of any
// Backend on the outbox) checks the lease and returns nothing; a fetch
// that started before may still return entries. Appends, leases, stats
// and operator calls are not affected. The reason is stored as MarkFailed
// stores errors (invalid UTF-8 replaced, at most 4096 bytes). See
// [outbox.Holder].
func (b *Backend) Hold(ctx context.Context, reason string) error {
	const op = "Hold"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	reason = cleanError(reason)
	_, err := b.db.ExecContext(ctx, b.ops.qHold, reason, reason)
	return b.opsError(ctx, op, err)
}

// Unhold deletes the hold row in one statement; relays deliver at their
// next fetch (it does not notify them). Unholding an outbox that is not
// held is a no-op. See [outbox.Holder].
func (b *Backend) Unhold(ctx context.Context) error {
	const op = "Unhold"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	_, err := b.db.ExecContext(ctx, b.ops.qUnhold)
	return b.opsError(ctx, op, err)
}

// HoldState reads the hold row in one statement: held, the reason and
// since, by the server's clock. See [outbox.Holder].
func (b *Backend) HoldState(ctx context.Context) (outbox.HoldState, error) {
	const op = "HoldState"
	if err := b.checkOpen(op); err != nil {
		return outbox.HoldState{}, err
	}
	var (
		s     outbox.HoldState
		since int64
	)
	err := b.db.QueryRowContext(ctx, b.ops.qHoldState).Scan(&s.Reason, &since)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return outbox.HoldState{}, nil
	case err != nil:
		return outbox.HoldState{}, b.opsError(ctx, op, err)
	}
	s.Held, s.Since = true, fromMicros(since)
	return s, nil
}

// Seal seals the outbox in one statement (queries/seal.sql): it sets the
// meta row's sealed flag. Every append reads that row with a shared lock
// in its transaction, so the update waits until every open transaction
// that appended has committed or rolled back, and appends that come after
// it wait for it, then read the flag and fail with an error wrapping
// [outbox.ErrSealed]: a transaction that had appended before Seal was
// called commits (or rolls back) before Seal returns, and none commits an
// append after. Relays' fetches and outcomes go on while Seal waits (they
// do not read the meta row). A transaction that stays open longer than
// the server's innodb_lock_wait_timeout (50 s by default) makes Seal fail
// with an error that says to run it again; the outbox is then not sealed.
// Once sealed, appends fail, and nothing else changes: relays, Export,
// Requeue, Cancel and the other operator calls work as before, and
// Import, which is not an append, still works. Sealing a sealed outbox is
// a no-op. When ctx ends while Seal waits, Seal stops its statement on the
// server (KILL CONNECTION of its connection; the server lets a user kill
// its own connections) and returns ctx's error: the outbox is then not sealed,
// unless the update had just been applied (Sealed tells). See
// [outbox.Sealer].
func (b *Backend) Seal(ctx context.Context) error {
	const op = "Seal"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	err := b.execStoppable(ctx, b.ops.qSeal)
	if isMySQLError(err, errLockWait) {
		return fmt.Errorf("%s: %s: a transaction that appended to %s stayed open longer than the server's innodb_lock_wait_timeout while Seal waited for it, so the outbox is not sealed: run Seal again (outbox move does), after finding the long transaction (information_schema.innodb_trx) if it happens again: %w",
			pkgName, op, b.names.outbox, err)
	}
	return b.opsError(ctx, op, err)
}

// Unseal clears the meta row's sealed flag in one statement (it waits,
// like Seal, for open appending transactions, and is stopped on the
// server like Seal when ctx ends); appends work again.
// Unsealing an outbox that is not sealed is a no-op. See [outbox.Sealer].
func (b *Backend) Unseal(ctx context.Context) error {
	const op = "Unseal"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	return b.opsError(ctx, op, b.execStoppable(ctx, b.ops.qUnseal))
}

// Sealed reports whether the outbox is sealed, from the meta row, in one
// statement (a read that takes no lock). See [outbox.Sealer].
func (b *Backend) Sealed(ctx context.Context) (bool, error) {
	const op = "Sealed"
	if err := b.checkOpen(op); err != nil {
		return false, err
	}
	var sealed bool
	if err := b.db.QueryRowContext(ctx, b.ops.qSealed).Scan(&sealed); err != nil {
		return false, b.opsError(ctx, op, err)
	}
	return sealed, nil
}

// execStoppable runs q, which may wait for row locks, on a connection of
// its own, and stops it on the server when ctx ends: the driver only
// drops the connection, and a statement waiting for a lock would still
// run once it got it. So when ctx has ended, KILL CONNECTION is sent from
// another connection of the pool: unlike KILL QUERY, which the server
// forgets when it comes before the statement starts, it also stops a
// statement still on its way; the killed connection is discarded, never
// reused.
func (b *Backend) execStoppable(ctx context.Context, q string) error {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		return err
	}
	_, err = conn.ExecContext(ctx, q)
	if ctx.Err() != nil {
		// The driver returns as soon as ctx ends, dropping the
		// connection; the server may still be running the statement.
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = b.db.ExecContext(kctx, "KILL CONNECTION "+strconv.FormatInt(id, 10))
		// Never hand a killed connection back to the pool.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	return err
}
