package mysqloutbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/headercodec"
)

// pkgName names this package in the errors of the header codec.
const pkgName = "mysqloutbox"

// Bounds of one append statement: at most maxAppendRows rows (8
// placeholders each, far below MySQL's 65,535) and, past the first row,
// at most maxAppendBytes of keys, payloads and headers, well below the
// smallest default max_allowed_packet (4 MiB on MySQL 5.7, 16 MiB on
// MariaDB, 64 MiB on MySQL 8). A larger call runs as several statements,
// in slice order; a single larger entry is sent by the driver in pieces.
const (
	maxAppendRows  = 500
	maxAppendBytes = 1 << 20
)

// AppendInTx inserts entries as part of tx. See
// [outbox.Backend.AppendInTx] for the contract.
//
// It first reads the outbox's seal with a shared lock that tx keeps until
// it ends (seal_lock.sql): once the outbox is sealed the call fails with
// an error wrapping [outbox.ErrSealed], in every isolation level, and a
// Seal waits for tx. Then one multi-row INSERT ... ON DUPLICATE KEY UPDATE
// id = id inserts the entries (an existing ID is a no-op; within one call
// the first occurrence wins; larger calls are split into statements of at
// most 500 rows and 1 MiB). Both statements are prepared once per
// connection: two round trips per call. created_at is the server's clock,
// next_at the later of it and NotBefore.
//
// With Options.KeySequence, after the seal it reads which IDs exist
// already (a consistent read; they take no number), adds the call's
// count of new entries of each key to the key's counter in the key
// sequence table (upserted in tx in key-hash order, so its row lock
// serializes the appends of a key until tx ends, and a rollback gives the
// numbers back), and inserts the new entries with their numbers in the
// [outbox.HeaderKeySeq] header, without ON DUPLICATE KEY: an ID a
// concurrent transaction appended and committed meanwhile fails the call
// with a duplicate key instead of leaving its number unused (roll back
// and retry). Four round trips for a call with one key.
//
// A deadlock or lock wait timeout returns an error for which [Retryable]
// is true: the transaction must run again ([Backend.InTx] does so). The
// partitions appended to are recorded with tx for the wake-up of
// [Backend.Commit] (unless Options.NoNotify).
func (b *Backend) AppendInTx(ctx context.Context, tx *sql.Tx, entries ...outbox.Entry) error {
	const op = "AppendInTx"
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if tx == nil {
		return fmt.Errorf("mysqloutbox: %s: tx is nil; pass the *sql.Tx of your transaction: %w", op, outbox.ErrInvalidArgument)
	}
	if b.opts.KeySequence {
		if err := outbox.CheckKeySeqHeaders(entries); err != nil {
			return fmt.Errorf("mysqloutbox: %s: %w", op, err)
		}
	}
	prepared, err := outbox.PrepareEntriesWith(ctx, entries, b.opts.Partitions, b.opts.Limits)
	if err != nil {
		return fmt.Errorf("mysqloutbox: %s: %w", op, err)
	}
	if err := b.checkSeal(ctx, tx); err != nil {
		return err
	}
	if b.opts.KeySequence {
		err = b.appendNumbered(ctx, tx, prepared)
	} else {
		err = b.insertRows(ctx, tx, appendRows(prepared, nil), true)
	}
	var concurrent *concurrentIDError
	if errors.As(err, &concurrent) {
		return fmt.Errorf("mysqloutbox: %s: %w", op, err)
	}
	if err != nil {
		return b.interpretError(op, err)
	}
	if !b.opts.NoNotify {
		b.core.txs.add(tx, prepared)
	}
	return nil
}

// checkSeal reads the seal with a shared lock held by tx (seal_lock.sql).
func (b *Backend) checkSeal(ctx context.Context, tx *sql.Tx) error {
	const op = "AppendInTx"
	var sealed bool
	err := tx.StmtContext(ctx, b.core.stmts.sealLock).QueryRowContext(ctx).Scan(&sealed)
	if err != nil && isForeignStmt(err) {
		err = tx.QueryRowContext(ctx, b.names.render(loadQuery("seal_lock"))).Scan(&sealed)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("mysqloutbox: %s: the outbox %s has no meta row (%s is empty): it was not created by mysqloutbox.Migrate, or the row was deleted; run Migrate", op, b.names.outbox, b.names.meta)
	case err != nil:
		return b.interpretError(op, err)
	case sealed:
		return b.sealedError(op)
	}
	return nil
}

// appendRow is the columns of one row an append inserts.
type appendRow struct {
	id, topic string
	partition int
	key       []byte
	payload   []byte
	headers   []byte
	notBefore any // microseconds since the epoch, or nil
	size      int
}

// appendRows returns the rows of prepared entries; seqs, when not nil,
// holds each entry's key sequence number (0: none).
func appendRows(prepared []outbox.Entry, seqs []int64) []appendRow {
	rows := make([]appendRow, len(prepared))
	for i, e := range prepared {
		h := e.Headers
		if seqs != nil && seqs[i] > 0 {
			h = maps.Clone(h)
			if h == nil {
				h = map[string]string{}
			}
			h[outbox.HeaderKeySeq] = outbox.FormatKeySeq(seqs[i])
		}
		r := appendRow{id: e.ID, topic: e.Topic, partition: e.Partition, key: []byte(e.Key),
			payload: e.Payload, headers: headercodec.Encode(h)}
		if !e.NotBefore.IsZero() {
			r.notBefore = toMicros(e.NotBefore)
		}
		r.size = len(r.key) + len(r.payload) + len(r.headers) + len(r.id) + len(r.topic)
		rows[i] = r
	}
	return rows
}

// insertRows inserts rows in order, in statements of at most
// maxAppendRows rows and maxAppendBytes bytes. skipDup adds ON DUPLICATE
// KEY UPDATE id = id (an existing ID is a no-op).
func (b *Backend) insertRows(ctx context.Context, tx *sql.Tx, rows []appendRow, skipDup bool) error {
	for len(rows) > 0 {
		n, size := 1, rows[0].size
		for n < len(rows) && n < maxAppendRows && size+rows[n].size <= maxAppendBytes {
			size += rows[n].size
			n++
		}
		args := make([]any, 0, 8*n)
		for _, r := range rows[:n] {
			args = append(args, r.id, r.partition, r.topic, r.key, r.payload, r.headers, r.notBefore, r.notBefore)
		}
		kind := insertStrict
		if skipDup {
			kind = insertSkipDup
		}
		if _, err := b.execShape(ctx, tx, appendKey{kind, n}, args); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// appendRowSQL is the VALUES tuple of one appended row: ? id,
// ? partition, ? topic, ? key, ? payload, ? headers, ? not_before and
// again ? not_before (microseconds since the epoch, or NULL); last_error
// is the empty string (a TEXT column has no default on MySQL before 8.0.13).
const appendRowSQL = "(?, ?, ?, ?, ?, ?, TIMESTAMPADD(MICROSECOND, ?, " + epochSQL + "), " + nowSQL +
	", GREATEST(" + nowSQL + ", COALESCE(TIMESTAMPADD(MICROSECOND, ?, " + epochSQL + "), " + nowSQL + ")), '')"

// shapeSQL is the text of the statement k names. The INSERT of k.rows
// rows reads UTC_TIMESTAMP once per statement, so the rows of one
// statement share created_at; seq (AUTO_INCREMENT) numbers them in VALUES
// order.
func (b *Backend) shapeSQL(k appendKey) string {
	var s strings.Builder
	switch k.kind {
	case insertSkipDup, insertStrict:
		s.WriteString("INSERT INTO " + b.names.outbox +
			" (id, `partition`, topic, `key`, payload, headers, not_before, created_at, next_at, last_error) VALUES ")
		for i := range k.rows {
			if i > 0 {
				s.WriteString(", ")
			}
			s.WriteString(appendRowSQL)
		}
		if k.kind == insertSkipDup {
			s.WriteString(" ON DUPLICATE KEY UPDATE id = id")
		}
	case selectIDs:
		s.WriteString("SELECT id FROM " + b.names.outbox + " WHERE id IN (" + placeholders(k.rows) + ")")
	case upsertKeys:
		// VALUES(last) works on MySQL 8 (deprecated, with a warning) and
		// MariaDB, which has no row alias.
		s.WriteString("INSERT INTO " + b.names.keyseq + " (key_hash, `key`, last) VALUES " +
			strings.Repeat("(?, ?, ?), ", k.rows-1) + "(?, ?, ?) ON DUPLICATE KEY UPDATE last = last + VALUES(last)")
	case selectKeys:
		s.WriteString("SELECT key_hash, last FROM " + b.names.keyseq + " WHERE key_hash IN (" + placeholders(k.rows) + ")")
	}
	return s.String()
}

// execShape runs the statement k names in tx, prepared when the cache
// holds it.
func (b *Backend) execShape(ctx context.Context, tx *sql.Tx, k appendKey, args []any) (sql.Result, error) {
	st, query := b.core.appends.get(k)
	if st == nil {
		return tx.ExecContext(ctx, query, args...)
	}
	return txStmt(ctx, tx, st, query, args...)
}

// queryShape is execShape for a query.
func (b *Backend) queryShape(ctx context.Context, tx *sql.Tx, k appendKey, args []any) (*sql.Rows, error) {
	st, query := b.core.appends.get(k)
	if st == nil {
		return tx.QueryContext(ctx, query, args...)
	}
	return txQuery(ctx, tx, st, query, args...)
}

// appendNumbered is the append of Options.KeySequence, after the seal.
func (b *Backend) appendNumbered(ctx context.Context, tx *sql.Tx, prepared []outbox.Entry) error {
	fresh, err := b.newEntries(ctx, tx, prepared)
	if err != nil || len(fresh) == 0 {
		return err
	}
	counts := map[string]int64{}
	for _, e := range fresh {
		if e.Key != "" {
			counts[e.Key]++
		}
	}
	last, err := b.bumpKeys(ctx, tx, counts)
	if err != nil {
		return err
	}
	// The call's entries of a key get last-count+1 .. last, in order.
	next := map[string]int64{}
	for k, n := range counts {
		next[k] = last[k] - n + 1
	}
	seqs := make([]int64, len(fresh))
	for i, e := range fresh {
		if e.Key != "" {
			seqs[i] = next[e.Key]
			next[e.Key]++
		}
	}
	err = b.insertRows(ctx, tx, appendRows(fresh, seqs), false)
	if isMySQLError(err, errDupEntry) {
		return &concurrentIDError{err}
	}
	return err
}

// concurrentIDError is the error of an append with Options.KeySequence
// that met an ID a concurrent transaction appended and committed while
// this one waited: [Retryable].
type concurrentIDError struct{ err error }

func (e *concurrentIDError) Error() string {
	return "an entry's ID was appended by a concurrent transaction that committed while this one waited for its key's sequence counter (with Options.KeySequence the append fails rather than skip the entry, which would leave its number unused): roll back and run the transaction again (Backend.InTx does so); the retry finds the entry and appends nothing for it: " + e.err.Error()
}

func (e *concurrentIDError) Unwrap() error { return e.err }

// newEntries returns the first occurrence of each ID of prepared whose ID
// is not in the outbox yet (by a consistent read, which takes no lock; IDs
// compared as bytes), in order.
func (b *Backend) newEntries(ctx context.Context, tx *sql.Tx, prepared []outbox.Entry) ([]outbox.Entry, error) {
	seen := make(map[string]bool, len(prepared))
	fresh := make([]outbox.Entry, 0, len(prepared))
	for _, e := range prepared {
		if !seen[e.ID] {
			seen[e.ID] = true
			fresh = append(fresh, e)
		}
	}
	existing, err := b.existingIDs(ctx, tx, fresh)
	if err != nil {
		return nil, err
	}
	if len(existing) == 0 {
		return fresh, nil
	}
	return slices.DeleteFunc(fresh, func(e outbox.Entry) bool { return existing[e.ID] }), nil
}

// maxInList bounds the IDs and keys of one IN (...) list.
const maxInList = 1000

// existingIDs returns which IDs of entries are in the outbox.
func (b *Backend) existingIDs(ctx context.Context, tx *sql.Tx, entries []outbox.Entry) (map[string]bool, error) {
	found := map[string]bool{}
	for chunk := range slices.Chunk(entries, maxInList) {
		args := make([]any, len(chunk))
		for i, e := range chunk {
			args[i] = e.ID
		}
		rows, err := b.queryShape(ctx, tx, appendKey{selectIDs, len(chunk)}, args)
		if err != nil {
			return nil, err
		}
		if err := scanStrings(rows, func(id string) { found[id] = true }); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// bumpKeys adds counts[key] to the counter of each key, in the order of
// the keys' hashes (so two appends never lock two keys in opposite
// orders), and returns each key's new last number.
func (b *Backend) bumpKeys(ctx context.Context, tx *sql.Tx, counts map[string]int64) (map[string]int64, error) {
	last := make(map[string]int64, len(counts))
	if len(counts) == 0 {
		return last, nil
	}
	type keyHash struct {
		key  string
		hash [32]byte
	}
	keys := make([]keyHash, 0, len(counts))
	for k := range counts {
		keys = append(keys, keyHash{k, sha256.Sum256([]byte(k))})
	}
	slices.SortFunc(keys, func(a, b keyHash) int { return bytes.Compare(a.hash[:], b.hash[:]) })
	if len(keys) == 1 {
		k := keys[0]
		res, err := txStmt(ctx, tx, b.core.stmts.keyseqOne, b.names.render(loadQuery("keyseq_one")),
			k.hash[:], []byte(k.key), counts[k.key], counts[k.key])
		if err != nil {
			return nil, err
		}
		n, err := res.LastInsertId()
		if err != nil {
			return nil, err
		}
		last[k.key] = n
		return last, nil
	}
	for chunk := range slices.Chunk(keys, maxInList) {
		up := make([]any, 0, 3*len(chunk))
		sel := make([]any, 0, len(chunk))
		byHash := make(map[[32]byte]string, len(chunk))
		for _, k := range chunk {
			up = append(up, k.hash[:], []byte(k.key), counts[k.key])
			sel = append(sel, k.hash[:])
			byHash[k.hash] = k.key
		}
		if _, err := b.execShape(ctx, tx, appendKey{upsertKeys, len(chunk)}, up); err != nil {
			return nil, err
		}
		if err := b.readKeys(ctx, tx, sel, byHash, last); err != nil {
			return nil, err
		}
	}
	return last, nil
}

// readKeys reads the counters of the key hashes sel (locked by tx's
// upsert) into last.
func (b *Backend) readKeys(ctx context.Context, tx *sql.Tx, sel []any, byHash map[[32]byte]string, last map[string]int64) error {
	rows, err := b.queryShape(ctx, tx, appendKey{selectKeys, len(sel)}, sel)
	if err != nil {
		return err
	}
	defer rows.Close()
	read := 0
	for rows.Next() {
		var h []byte
		var n int64
		if err := rows.Scan(&h, &n); err != nil {
			return err
		}
		var hash [32]byte
		copy(hash[:], h)
		last[byHash[hash]] = n
		read++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if read != len(byHash) {
		return fmt.Errorf("key sequence counters missing after their upsert (%d of %d read)", read, len(byHash))
	}
	return nil
}

// placeholders returns "?, ?, ..." with n marks.
func placeholders(n int) string {
	return strings.Repeat("?, ", n-1) + "?"
}

// scanStrings calls f with the single string column of each row, and
// closes rows.
func scanStrings(rows *sql.Rows, f func(string)) error {
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err
		}
		f(s)
	}
	return rows.Err()
}
