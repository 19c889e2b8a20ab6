package pgoutbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/outboxrelay/outbox/internal/sqlrow"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxrelay/outbox"
)

// This file implements the optional interfaces of moving a live outbox
// (outbox.Exporter, outbox.Importer, outbox.Holder, outbox.Sealer) on the
// objects of migration 006: the hold table, the import sequence and the
// seal function. docs/postgres.md, "Moving an outbox", explains the
// design and its costs.

// sealedSQLState is the SQLSTATE the seal trigger raises (migration 006's
// seal function); interpretError maps it to outbox.ErrSealed.
const sealedSQLState = "OBSLD"

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// ExportBatch returns up to limit entries of lease.Partition, whatever
// their state (due, scheduled, retrying, held back, claimed, parked), with
// their attempt history and deferral, in seq order, the partition's append order: imported entries first, in
// the order imported, then appended ones (a requeued entry has the seq of
// its requeue). One read-only statement, fenced like FindPendingBatch: a
// lease that is not live gives an error wrapping [outbox.ErrLeaseLost]. A
// limit that is not positive gives [outbox.ErrInvalidArgument].
//
// A pending row that cannot be published as stored (its topic column is
// empty or its headers column does not decode; only a hand-made UPDATE
// writes such values) is exported parked, with what could be read (nil
// Headers when they do not decode) and a LastError naming the column and
// the fix, as [Backend.Lookup] shows it, so the move carries it on for an
// operator instead of stalling. A parked row is exported as it is (an
// empty topic included: Import stores a parked entry without one), with
// the reason added to its LastError only when its headers do not decode. A negative attempts column reads as 0 and an
// infinite timestamp as the zero time (a pending row whose next_at is
// 'infinity' is then exported with a zero DueAt, due now).
//
// Without an index on (partition, seq) each call sorts the partition's
// rows (a top-N sort); see docs/postgres.md for the cost and the index to
// create before moving a large backlog. Safe for concurrent use; after
// Close it returns [outbox.ErrClosed]. See [outbox.Exporter].
func (b *Backend) ExportBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.EntryInfo, error) {
	const op = "ExportBatch"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	if err := outbox.CheckFetch(b.opts.Partitions, lease, limit); err != nil {
		return nil, argErr(op, err)
	}
	rows, err := b.pool.Query(ctx, b.qExport, lease.Partition, lease.Owner, lease.Version, limit)
	if err != nil {
		return nil, b.interpretError(op, err)
	}
	defer rows.Close()
	leaseOK := false
	var out []outbox.EntryInfo
	var seqs []int64
	for rows.Next() {
		leaseOK = true
		var (
			seq      pgtype.Int8
			id       pgtype.Text
			topic    pgtype.Text
			key      []byte
			payload  []byte
			headers  []byte
			notBef   pgtype.Timestamptz
			attempts pgtype.Int4
			lastErr  pgtype.Text
			created  pgtype.Timestamptz
			parked   pgtype.Bool
			nextAt   pgtype.Timestamptz
			deferred pgtype.Bool
			history  []byte
		)
		if err := rows.Scan(&seq, &id, &topic, &key, &payload, &headers, &notBef, &attempts, &lastErr, &created, &parked, &nextAt, &deferred, &history); err != nil {
			return nil, b.interpretError(op, err)
		}
		if !id.Valid { // the lease holds, the partition is empty
			continue
		}
		info := outbox.EntryInfo{Entry: outbox.Entry{
			ID: id.String, Topic: topic.String, Key: string(key), Payload: payload,
			NotBefore: timeOf(notBef), Partition: lease.Partition,
			Attempts: attemptsOf(attempts.Int32), LastError: lastErr.String, CreatedAt: timeOf(created),
		}, Parked: parked.Bool, Deferred: deferred.Bool, History: decodeHistory(history)}
		topicCheck := info.Topic
		if info.Parked {
			// A parked entry may have no topic (an import stores one so);
			// it is exported as it is, last error included.
			topicCheck = "-"
		}
		c := checkRow(topicCheck, headers, int32(lease.Partition), 0)
		info.Headers = c.headers
		if c.reason != "" {
			info.Parked, info.Deferred, info.LastError = true, false, sqlrow.WithReason(info.LastError, c.reason)
		}
		if !info.Parked {
			info.DueAt = timeOf(nextAt)
		}
		out = append(out, info)
		seqs = append(seqs, seq.Int64)
	}
	if err := rows.Err(); err != nil {
		return nil, b.interpretError(op, err)
	}
	if !leaseOK {
		return nil, leaseLost(op, lease)
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

// RemoveExported deletes the entries with the given IDs from
// lease.Partition, whatever their state, in one statement fenced like
// [Backend.MarkSent], and never archives them (with Options.Archive
// too): they were moved, not sent. IDs that are unknown, already gone or
// of another partition are ignored. An empty ids returns nil without a
// query. A lease that is not live gives an error wrapping
// [outbox.ErrLeaseLost] and nothing is removed. ids is not retained. See
// [outbox.Exporter].
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
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return !storableText(id) })
	return b.fenced(ctx, op, lease, b.qRemoveExported, lease.Partition, lease.Owner, lease.Version, ids)
}

// Import adds entries exported from another outbox, as they were there
// (ID, topic, key, payload, headers, NotBefore, CreatedAt, attempts, last
// error, parked state, due time, the attempt history, its last
// [outbox.MaxAttemptHistory] attempts stored as MarkFailed stores them,
// and Deferred, which a pending entry keeps, so that it holds back its
// key here too), each to partition
// PartitionOf(Key, Partitions()) as appends place it, in one statement
// (queries/import.sql), and returns how many it added. An ID already
// stored (imported or appended), or repeated in the call after its first
// occurrence, is skipped.
//
// Imported entries take their seq from the import sequence of migration
// 006, which counts up from the lowest bigint, so in the fetch's (due
// time, seq) order and in the per-key hold-back they come before every
// appended entry (whose seq counts up from 1), among themselves in the
// order imported. An imported entry with Attempts > 0 that is not parked
// holds back the appended entries of its key. A due entry (DueAt zero or
// not after the database's now(); or, never attempted and without
// NotBefore, so due at its source since its append, DueAt less than a
// minute ahead of now(): the skew between the two clocks) is made due at the earlier of its DueAt
// and the time the outbox was first held (now() when it is not held); an
// entry due later keeps its DueAt. A zero CreatedAt is stored as now().
//
// Each entry must have a non-empty ID of at most [outbox.MaxIDLen] bytes,
// a topic of at most [outbox.MaxTopicLen] bytes (empty only when parked)
// and a key of at most [outbox.MaxKeyLen] bytes, and its ID and topic must
// be valid UTF-8 without NUL bytes (PostgreSQL text); else the call fails
// with an error wrapping [outbox.ErrInvalidEntry] naming the entry, and
// nothing is added. Options.Limits and Options.KeySequence do not apply
// (outbox.HeaderKeySeq headers are stored as given). LastError is stored
// as MarkFailed stores errors (invalid UTF-8 and NUL replaced, at most
// 4096 bytes). No entries returns 0, nil without a query. It does not
// notify relays (a destination is held while entries are imported).
// Import does not append: it works on a sealed outbox. It does not retain
// entries. Safe for concurrent use (concurrent calls interleave their
// seq values); after Close it returns [outbox.ErrClosed]. See
// [outbox.Importer].
func (b *Backend) Import(ctx context.Context, entries []outbox.EntryInfo) (int, error) {
	const op = "Import"
	if err := b.checkOpen(op); err != nil {
		return 0, err
	}
	if len(entries) == 0 {
		return 0, nil
	}
	n := len(entries)
	var (
		ids, topics, lastErrs = make([]string, n), make([]string, n), make([]string, n)
		parts, attempts       = make([]int32, n), make([]int32, n)
		keys, payloads, hdrs  = make([][]byte, n), make([][]byte, n), make([][]byte, n)
		notBefore, created    = make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n)
		due                   = make([]pgtype.Timestamptz, n)
		parked, deferred      = make([]bool, n), make([]bool, n)
		history               = make([]pgtype.Text, n)
	)
	for i, e := range entries {
		if err := checkImported(e); err != nil {
			return 0, fmt.Errorf("pgoutbox: %s: %w: entry %d (id %q): %s", op, outbox.ErrInvalidEntry, i, e.ID, err)
		}
		ids[i], topics[i], lastErrs[i] = e.ID, e.Topic, cleanError(e.LastError)
		parts[i] = int32(outbox.PartitionOf(e.Key, b.opts.Partitions))
		attempts[i] = int32(min(max(e.Attempts, 0), 1<<31-1))
		keys[i], payloads[i], hdrs[i] = []byte(e.Key), e.Payload, EncodeHeaders(e.Headers)
		notBefore[i], created[i], due[i] = tstz(e.NotBefore), tstz(e.CreatedAt), tstz(e.DueAt)
		parked[i], deferred[i] = e.Parked, e.Deferred
		h, err := encodeHistory(e.History)
		if err != nil {
			return 0, fmt.Errorf("pgoutbox: %s: entry %d (id %q): encoding its attempt history: %w", op, i, e.ID, err)
		}
		history[i] = pgtype.Text{String: string(h), Valid: h != nil}
	}
	var added int
	err := b.pool.QueryRow(ctx, b.qImport, ids, parts, topics, keys, payloads, hdrs, notBefore,
		created, attempts, lastErrs, parked, due, b.names.importSeq, history, deferred).Scan(&added)
	if err != nil {
		return 0, b.interpretError(op, err)
	}
	return added, nil
}

// tstz is t as a timestamptz parameter; the zero time is NULL.
func tstz(t time.Time) pgtype.Timestamptz {
	if t.IsZero() {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: t, Valid: true}
}

// checkImported checks what Import must be able to store of e.
func checkImported(e outbox.EntryInfo) error {
	switch {
	case e.ID == "":
		return errors.New("the ID is empty")
	case len(e.ID) > outbox.MaxIDLen:
		return fmt.Errorf("the ID is %d bytes, the limit is %d", len(e.ID), outbox.MaxIDLen)
	case !storableText(e.ID):
		return errors.New("the ID must be valid UTF-8 without NUL bytes (PostgreSQL text)")
	case e.Topic == "" && !e.Parked:
		return errors.New("the topic is empty and the entry is not parked")
	case len(e.Topic) > outbox.MaxTopicLen:
		return fmt.Errorf("the topic is %d bytes, the limit is %d", len(e.Topic), outbox.MaxTopicLen)
	case !storableText(e.Topic):
		return errors.New("the topic must be valid UTF-8 without NUL bytes (PostgreSQL text)")
	case len(e.Key) > outbox.MaxKeyLen:
		return fmt.Errorf("the key is %d bytes, the limit is %d", len(e.Key), outbox.MaxKeyLen)
	}
	return nil
}

// Hold holds the outbox in one statement: it creates the row of the hold
// table (migration 006) with the reason and since = now() by the
// database's clock or, when the outbox is held, replaces the reason and
// keeps since. From its commit on, every FindPendingBatch and FetchBatch
// (of any Backend on the outbox) checks the lease and returns nothing; a
// fetch that started before may still return entries. Appends, leases,
// stats and operator calls are not affected. The reason is stored as
// MarkFailed stores errors (invalid UTF-8 and NUL replaced, at most 4096
// bytes). See [outbox.Holder].
func (b *Backend) Hold(ctx context.Context, reason string) error {
	const op = "Hold"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	_, err := b.pool.Exec(ctx, b.qHold, cleanError(reason))
	return b.interpretError(op, err)
}

// Unhold deletes the hold row in one statement; relays deliver at their
// next fetch (it does not notify them). Unholding an outbox that is not
// held is a no-op. See [outbox.Holder].
func (b *Backend) Unhold(ctx context.Context) error {
	const op = "Unhold"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	_, err := b.pool.Exec(ctx, b.qUnhold)
	return b.interpretError(op, err)
}

// HoldState reads the hold row in one statement: held, the reason and
// since, by the database's clock. See [outbox.Holder].
func (b *Backend) HoldState(ctx context.Context) (outbox.HoldState, error) {
	const op = "HoldState"
	if err := b.checkOpen(op); err != nil {
		return outbox.HoldState{}, err
	}
	var s outbox.HoldState
	err := b.pool.QueryRow(ctx, b.qHoldState).Scan(&s.Reason, &s.Since)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return outbox.HoldState{}, nil
	case err != nil:
		return outbox.HoldState{}, b.interpretError(op, err)
	}
	s.Held = true
	return s, nil
}

// Seal seals the outbox in one statement (queries/seal.sql): it locks the
// key sequence table and the outbox table in SHARE ROW EXCLUSIVE mode,
// which waits until every open transaction that appended to the outbox
// has committed or rolled back, and creates, unless they exist, the
// triggers that run migration 006's seal function: BEFORE INSERT on each
// row of the outbox table whose seq is positive (every appended row; an
// idempotent re-append too, since ON CONFLICT runs BEFORE triggers first)
// and BEFORE INSERT on each statement on the key sequence table (the
// append statement of Options.KeySequence, which inserts no outbox row
// when every ID is already stored). An append that waited behind the lock, and
// every append after, fails at its INSERT with an error wrapping
// [outbox.ErrSealed] that names the outbox and the fix; a transaction
// that had appended before Seal was called commits (or rolls back) before
// Seal returns. Relays' fetches go on while Seal waits; their MarkSent
// and MarkFailed wait with the appends (for as long as the oldest open
// appending transaction stays open, bounded by ctx). Once sealed,
// appends fail, and nothing else changes: relays, Export, Requeue, Cancel
// and the other operator calls work as before (they insert no rows), and
// Import, which is not an append, still works. Sealing a sealed outbox
// is a no-op. It needs the right to create a trigger on the table (its
// owner or the TRIGGER privilege). See [outbox.Sealer].
func (b *Backend) Seal(ctx context.Context) error {
	const op = "Seal"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	_, err := b.pool.Exec(ctx, b.qSeal)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42710" { // duplicate_object: a concurrent Seal won
		err = nil
	}
	if err != nil {
		return b.interpretError(op, err)
	}
	// The export reads a partition in seq order; without an index on
	// (partition, seq) each ExportBatch sorts the whole partition (about
	// 150 ms a call at 100k entries, so a move of n entries costs n²).
	// A sealed outbox takes no appends, so the index costs them nothing;
	// Unseal drops it. CONCURRENTLY: relays and operators keep working
	// while it builds. No arguments: pgx sends it as a simple query,
	// outside any transaction block, which CONCURRENTLY needs.
	//
	// A build that failed earlier (a lock timeout, a cancel) left an
	// INVALID index of that name, which the planner never uses and IF NOT
	// EXISTS would keep: it is dropped first, so running Seal (the move)
	// again builds the index. (A build still running in a concurrent Seal
	// is invalid too; dropping it makes that Seal fail, and it can be run
	// again.)
	var valid bool
	err = b.pool.QueryRow(ctx, "SELECT indisvalid FROM pg_catalog.pg_index WHERE indexrelid = to_regclass($1)", b.names.exportIdx).Scan(&valid)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return b.interpretError(op, err)
	case !valid:
		if _, err := b.pool.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+b.names.exportIdx); err != nil {
			return b.interpretError(op, fmt.Errorf("dropping the invalid export index %s left by a build that failed (the outbox is sealed; run outbox move again, or drop it by hand): %w", b.names.exportIdx, err))
		}
	}
	if _, err := b.pool.Exec(ctx, "CREATE INDEX CONCURRENTLY IF NOT EXISTS "+b.names.exportIdxBare+" ON "+b.names.outbox+" (partition, seq)"); err != nil {
		return b.interpretError(op, fmt.Errorf("building the export index %s (the outbox is sealed; run outbox move again, or build it by hand): %w", b.names.exportIdx, err))
	}
	return nil
}

// Unseal drops the seal triggers in one statement (which waits, like
// Seal, for open transactions on the tables); appends work again.
// Unsealing an outbox that is not sealed is a no-op. See [outbox.Sealer].
func (b *Backend) Unseal(ctx context.Context) error {
	const op = "Unseal"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if _, err := b.pool.Exec(ctx, b.qUnseal); err != nil {
		return b.interpretError(op, err)
	}
	// The export index Seal built would slow the appends down again.
	_, err := b.pool.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+b.names.exportIdx)
	return b.interpretError(op, err)
}

// Sealed reports whether the outbox table's seal trigger exists, from the catalog, in
// one statement. An outbox from before migration 006 cannot be sealed and
// reports false. See [outbox.Sealer].
func (b *Backend) Sealed(ctx context.Context) (bool, error) {
	const op = "Sealed"
	if err := b.checkOpen(op); err != nil {
		return false, err
	}
	var sealed bool
	if err := b.pool.QueryRow(ctx, b.qSealed, b.names.outbox, b.opts.Table+"_sealed").Scan(&sealed); err != nil {
		return false, b.interpretError(op, err)
	}
	return sealed, nil
}
