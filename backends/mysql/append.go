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
	"strconv"
	"strings"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/headercodec"
)

// pkgName names this package in the errors of the header codec.
const pkgName = "mysqloutbox"

// Bounds of one append statement: at most maxAppendRows rows (at most 8
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
// One statement, prepared once per connection, inserts the entries: an
// INSERT ... SELECT of the rows (a UNION ALL of placeholders, ordered by
// their position in entries, so seq follows slice order) joined to the
// meta row where sealed = 0, read with LOCK IN SHARE MODE, ON DUPLICATE KEY
// UPDATE id = id (an existing ID is a no-op; within one call the first
// occurrence wins; larger calls are split into statements of at most 500
// rows and 1 MiB). The locking read of the meta row reads its newest
// committed version in every isolation level and tx keeps the shared lock
// until it ends: a Seal waits for tx, and once the outbox is sealed the
// join selects no row. One round trip per call when the statement
// inserts every row. When it inserts fewer rows than it was given (IDs
// that exist, or repeated in the call, or a sealed outbox), it reads the
// seal with a shared lock (seal_lock.sql): sealed, the call fails with an
// error wrapping [outbox.ErrSealed], in every isolation level; not
// sealed, it runs the statement once more under that lock (a Seal and an
// Unseal may both have committed in between; for IDs that exist it is a
// no-op): three round trips. created_at is the server's clock, next_at
// the later of it and NotBefore.
//
// With Options.KeySequence, it first reads the seal with a shared lock
// (seal_lock.sql; sealed: the error above), then reads which IDs exist
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
	if b.opts.KeySequence {
		err = b.appendNumbered(ctx, tx, prepared)
	} else {
		err = b.insertFenced(ctx, tx, appendRows(prepared, nil))
	}
	var final *finalError
	if errors.As(err, &final) {
		return final.err
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

// finalError carries an error of AppendInTx already in its final form
// (checkSeal's).
type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }

func (e *finalError) Unwrap() error { return e.err }

// splitRows calls f with rows in order, in runs of at most maxAppendRows
// rows and, past a run's first row, maxAppendBytes bytes: one statement
// each.
func splitRows(rows []appendRow, f func([]appendRow) error) error {
	for len(rows) > 0 {
		n, size := 1, rows[0].size
		for n < len(rows) && n < maxAppendRows && size+rows[n].size <= maxAppendBytes {
			size += rows[n].size
			n++
		}
		if err := f(rows[:n]); err != nil {
			return err
		}
		rows = rows[n:]
	}
	return nil
}

// insertFenced inserts rows in order with the statement of insertSkipDup,
// which inserts nothing once the outbox is sealed. A statement that
// inserted a row read the meta row unsealed and left tx its shared lock,
// so the later statements of the call need no check. One that inserted
// none before that (its IDs exist, or the outbox is sealed) is followed
// by checkSeal (a locking read; sealed: its error, as a finalError) and,
// when not sealed, is run once more under the lock checkSeal took: a Seal
// and an Unseal may both have committed since it ran.
func (b *Backend) insertFenced(ctx context.Context, tx *sql.Tx, rows []appendRow) error {
	fenced := false // tx holds the meta row's shared lock, read unsealed
	return splitRows(rows, func(chunk []appendRow) error {
		args := make([]any, 0, 7*len(chunk))
		for _, r := range chunk {
			args = append(args, r.id, r.partition, r.topic, r.key, r.payload, r.headers, r.notBefore)
		}
		if len(chunk) == 1 {
			args = append(args, chunk[0].notBefore)
		}
		k := appendKey{insertSkipDup, len(chunk)}
		res, err := b.execShape(ctx, tx, k, args)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n > 0 || fenced {
			fenced = true
			return nil
		}
		if err := b.checkSeal(ctx, tx); err != nil {
			return &finalError{err}
		}
		fenced = true
		_, err = b.execShape(ctx, tx, k, args)
		return err
	})
}

// insertRows inserts rows in order, without the seal fence (the
// KeySequence path checks it first): a duplicate ID fails.
func (b *Backend) insertRows(ctx context.Context, tx *sql.Tx, rows []appendRow) error {
	return splitRows(rows, func(chunk []appendRow) error {
		args := make([]any, 0, 8*len(chunk))
		for _, r := range chunk {
			args = append(args, r.id, r.partition, r.topic, r.key, r.payload, r.headers, r.notBefore, r.notBefore)
		}
		_, err := b.execShape(ctx, tx, appendKey{insertStrict, len(chunk)}, args)
		return err
	})
}

// appendRowSQL is the VALUES tuple of one row of insertStrict: ? id,
// ? partition, ? topic, ? key, ? payload, ? headers, ? not_before and
// again ? not_before (microseconds since the epoch, or NULL); last_error
// is the empty string (a TEXT column has no default on MySQL before 8.0.13).
const appendRowSQL = "(?, ?, ?, ?, ?, ?, TIMESTAMPADD(MICROSECOND, ?, " + epochSQL + "), " + nowSQL +
	", GREATEST(" + nowSQL + ", COALESCE(TIMESTAMPADD(MICROSECOND, ?, " + epochSQL + "), " + nowSQL + ")), '')"

// appendColumnsSQL is the column list of the appends.
const appendColumnsSQL = " (id, `partition`, topic, `key`, payload, headers, not_before, created_at, next_at, last_error) "

// fencedRowSQL is the placeholders of one row of insertSkipDup: id,
// partition, topic, key, payload, headers and not_before (microseconds
// since the epoch, or NULL), each in a CAST that gives it its type. Bare
// placeholders in a UNION of rows sent as a prepared statement (the
// driver's binary protocol) came out mistyped on MariaDB 10.11: strings
// without their trailing spaces, numbers as 0 or NULL.
const fencedRowSQL = "CAST(? AS BINARY), CAST(? AS SIGNED), CAST(? AS BINARY), CAST(? AS BINARY), CAST(? AS BINARY), CAST(? AS BINARY), CAST(? AS SIGNED)"

// fencedSelectSQL selects the columns of appendColumnsSQL from the
// placeholders of fencedRowSQL as columns v_id, v_part, v_topic, v_key,
// v_payload, v_headers and v_nb of v; last_error is the empty string (a
// TEXT column has no default on MySQL before 8.0.13).
const fencedSelectSQL = "SELECT v.v_id, v.v_part, v.v_topic, v.v_key, v.v_payload, v.v_headers, " +
	"TIMESTAMPADD(MICROSECOND, v.v_nb, " + epochSQL + "), " + nowSQL + ", GREATEST(" + nowSQL +
	", COALESCE(TIMESTAMPADD(MICROSECOND, v.v_nb, " + epochSQL + "), " + nowSQL + ")), ''"

// fencedOneSQL selects the columns of appendColumnsSQL from the
// placeholders of fencedRowSQL and again ? not_before.
const fencedOneSQL = "CAST(? AS BINARY), CAST(? AS SIGNED), CAST(? AS BINARY), CAST(? AS BINARY), CAST(? AS BINARY), CAST(? AS BINARY), " +
	"TIMESTAMPADD(MICROSECOND, CAST(? AS SIGNED), " + epochSQL + "), " + nowSQL + ", GREATEST(" + nowSQL +
	", COALESCE(TIMESTAMPADD(MICROSECOND, CAST(? AS SIGNED), " + epochSQL + "), " + nowSQL + ")), ''"

// fencedSQL is the statement of insertSkipDup with rows rows: the rows,
// numbered in order (v_n) in a UNION ALL, joined to the meta row where
// sealed = 0, read with a shared lock, inserted in v_n order ON DUPLICATE
// KEY UPDATE id = id. A single row (fencedOneSQL, 8 placeholders) is
// selected from the meta row itself, without a derived table.
func (b *Backend) fencedSQL(rows int) string {
	const tail = " LOCK IN SHARE MODE ON DUPLICATE KEY UPDATE id = "
	if rows == 1 {
		return "INSERT INTO " + b.names.outbox + appendColumnsSQL + "SELECT " + fencedOneSQL + " FROM " + b.names.meta +
			" AS m WHERE m.one = 1 AND m.sealed = 0" + tail + b.names.outbox + ".id"
	}
	const head = "SELECT 0 AS v_n, CAST(? AS BINARY) AS v_id, CAST(? AS SIGNED) AS v_part, CAST(? AS BINARY) AS v_topic, " +
		"CAST(? AS BINARY) AS v_key, CAST(? AS BINARY) AS v_payload, CAST(? AS BINARY) AS v_headers, CAST(? AS SIGNED) AS v_nb"
	var s strings.Builder
	s.WriteString("INSERT INTO " + b.names.outbox + appendColumnsSQL + fencedSelectSQL + " FROM (" + head)
	for i := 1; i < rows; i++ {
		s.WriteString(" UNION ALL SELECT " + strconv.Itoa(i) + ", " + fencedRowSQL)
	}
	s.WriteString(") AS v JOIN " + b.names.meta + " AS m ON m.one = 1 AND m.sealed = 0 ORDER BY v.v_n" + tail + b.names.outbox + ".id")
	return s.String()
}

// shapeSQL is the text of the statement k names. An INSERT reads
// UTC_TIMESTAMP once per statement, so the rows of one statement share
// created_at; seq (AUTO_INCREMENT) numbers them in slice order.
func (b *Backend) shapeSQL(k appendKey) string {
	var s strings.Builder
	switch k.kind {
	case insertSkipDup:
		s.WriteString(b.fencedSQL(k.rows))
	case insertStrict:
		s.WriteString("INSERT INTO " + b.names.outbox + appendColumnsSQL + "VALUES ")
		for i := range k.rows {
			if i > 0 {
				s.WriteString(", ")
			}
			s.WriteString(appendRowSQL)
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

// appendNumbered is the append of Options.KeySequence: the seal, then
// the numbered entries.
func (b *Backend) appendNumbered(ctx context.Context, tx *sql.Tx, prepared []outbox.Entry) error {
	if err := b.checkSeal(ctx, tx); err != nil {
		return &finalError{err}
	}
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
	err = b.insertRows(ctx, tx, appendRows(fresh, seqs))
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

// existingIDs returns which IDs of entries are in the outbox.
func (b *Backend) existingIDs(ctx context.Context, tx *sql.Tx, entries []outbox.Entry) (map[string]bool, error) {
	found := map[string]bool{}
	for chunk := range slices.Chunk(entries, maxIDsPerStatement) {
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
	for chunk := range slices.Chunk(keys, maxIDsPerStatement) {
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
