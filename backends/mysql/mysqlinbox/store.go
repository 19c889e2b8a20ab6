package mysqlinbox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"fmt"
	"iter"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/inbox"
)

//go:embed queries/*.sql
var queryFS embed.FS

// query names one statement of queries/*.sql.
type query int

const (
	qRecord query = iota
	qRecordOne
	qRecordMine
	qKeySeqs
	qKeySeqsLock
	qSetKeySeqs
	qSaveOffsets
	qOffsets
	qPurgeIDs
	qPurgeIDsDelete
	qPurgeKeys
	qPurgeKeysDelete
	qFinish
	qOldest
	numQueries
)

var queryFiles = [numQueries]string{
	qRecord: "record", qRecordOne: "record_one", qRecordMine: "record_mine",
	qKeySeqs: "key_seqs", qKeySeqsLock: "key_seqs_lock", qSetKeySeqs: "set_key_seqs",
	qSaveOffsets: "save_offsets", qOffsets: "offsets",
	qPurgeIDs: "purge_ids", qPurgeIDsDelete: "purge_ids_delete",
	qPurgeKeys: "purge_keys", qPurgeKeysDelete: "purge_keys_delete",
	qFinish: "finish", qOldest: "oldest",
}

// renderQueries reads the embedded queries and puts the table names in.
// A missing file is a defect of the build: it panics.
func renderQueries(n names) [numQueries]string {
	r := strings.NewReplacer("{inbox}", n.inbox, "{keyseq}", n.keyseq, "{offsets}", n.offsets,
		"{finish}", n.finish)
	var out [numQueries]string
	for q, name := range queryFiles {
		b, err := queryFS.ReadFile("queries/" + name + ".sql")
		if err != nil {
			panic("mysqlinbox: missing embedded query " + name + ": " + err.Error())
		}
		out[q] = r.Replace(string(b))
	}
	return out
}

// Limits of what the tables store.
const (
	// maxIDLen is the longest ID, in bytes (the id column).
	maxIDLen = 255
	// maxNameLen is the longest consumer group and topic of an Offset, in
	// bytes (the grp and topic columns).
	maxNameLen = 255
	// maxPerStatement bounds the IDs, keys or offsets one statement
	// carries; a longer list takes one statement per chunk.
	maxPerStatement = 1000
	// defaultRetryAfter is how long a Store waits before preparing its
	// statements again after a failure, and before calling the procedure
	// again after finding them missing.
	defaultRetryAfter = time.Minute
)

// Store is the MySQL and MariaDB [inbox.Store] over *sql.Tx: the records
// live in the tables of an inbox created by [Migrate], in the database of
// the *sql.DB given to [New], and the consumer's handler writes its
// effects in the same transaction.
//
// A Store is safe for concurrent use. Its statements are prepared once
// (on the first InTx, Offsets or Purge, then on each pool connection they
// first run on), so each is one round trip; see the package
// documentation for the round trips of each method.
type Store struct {
	db   *sql.DB
	iso  sql.IsolationLevel
	n    names
	text [numQueries]string

	stmts   atomic.Pointer[[numQueries]*sql.Stmt] // nil until prepared, and after Close
	noProcs atomic.Int64                          // UnixNano when a CALL found migration 002's procedure missing

	retryAfter time.Duration // defaultRetryAfter; tests shorten it

	mu       sync.Mutex // serializes prepare and Close
	lastTry  time.Time  // of a prepare that failed
	isClosed bool
}

var _ inbox.Store[*sql.Tx] = (*Store)(nil)

// New returns the Store of the inbox named by opts.Table in db's
// database. It does no I/O: a missing inbox shows at the first call, as
// an error that says to run [Migrate]. db must come from
// sql.Open("mysql", dsn) (github.com/go-sql-driver/mysql); the Store
// begins its transactions on it, and Record, KeySeqs, SetKeySeqs and
// SaveOffsets accept a transaction of any pool of the same server (one
// of another *sql.DB runs the statements unprepared: two or three round
// trips each unless the DSN sets interpolateParams=true).
func New(db *sql.DB, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errNilDB("New")
	}
	n := newNames(opts.Table)
	return &Store{db: db, iso: opts.Isolation, n: n, text: renderQueries(n), retryAfter: defaultRetryAfter}, nil
}

// Close releases the Store's prepared statements. The Store stays usable
// after Close, with its statements unprepared (two or three round trips
// each, unless the DSN sets interpolateParams=true); it does not close
// the *sql.DB, which is the caller's. Close is idempotent and returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.isClosed = true
	if st := s.stmts.Swap(nil); st != nil {
		for _, p := range st {
			if p != nil {
				p.Close()
			}
		}
	}
	return nil
}

// prepare prepares the statements on the pool once. It is best effort:
// after a failure (a missing table, the server's max_prepared_stmt_count)
// the statements run unprepared, and the next prepare is tried a minute
// later; the statements themselves then report what is wrong.
func (s *Store) prepare(ctx context.Context) {
	if s.stmts.Load() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.isClosed || s.stmts.Load() != nil || (!s.lastTry.IsZero() && time.Since(s.lastTry) < s.retryAfter) {
		return
	}
	var st [numQueries]*sql.Stmt
	for q := range numQueries {
		p, err := s.db.PrepareContext(ctx, s.text[q])
		if err != nil && q == qFinish && ctx.Err() == nil {
			continue // a server that checks the procedure at prepare: it runs unprepared, and fails with 1305
		}
		if err != nil {
			for _, p := range st[:q] {
				if p != nil {
					p.Close()
				}
			}
			if ctx.Err() == nil { // a caller's ended context says nothing of the server
				s.lastTry = time.Now()
			}
			return
		}
		st[q] = p
	}
	s.stmts.Store(&st)
}

// stmt returns the prepared statement of q, or nil.
func (s *Store) stmt(q query) *sql.Stmt {
	if st := s.stmts.Load(); st != nil {
		return st[q]
	}
	return nil
}

// unusableStmt reports whether err is database/sql refusing a prepared
// statement before any I/O: one prepared on another *sql.DB than the
// transaction's, or one that Close closed meanwhile.
func unusableStmt(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "sql: Tx.Stmt: statement from different database") || msg == "sql: statement is closed"
}

// exec runs q in tx, prepared when it can be.
func (s *Store) exec(ctx context.Context, tx *sql.Tx, q query, args ...any) (sql.Result, error) {
	if st := s.stmt(q); st != nil {
		res, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...)
		if !unusableStmt(err) {
			return res, err
		}
	}
	return tx.ExecContext(ctx, s.text[q], args...)
}

// query runs q in tx, prepared when it can be.
func (s *Store) query(ctx context.Context, tx *sql.Tx, q query, args ...any) (*sql.Rows, error) {
	if st := s.stmt(q); st != nil {
		rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, args...)
		if !unusableStmt(err) {
			return rows, err
		}
	}
	return tx.QueryContext(ctx, s.text[q], args...)
}

// InTx implements [inbox.Store]: it begins a transaction on the Store's
// *sql.DB at Options.Isolation (default: the session's level, REPEATABLE
// READ unless the DSN or server says otherwise), calls fn and commits
// when fn returns nil. When fn returns an error or panics, the
// transaction is rolled back and fn's error returned (the panic
// re-raised). A failed commit returns an error for which Retryable
// reports a deadlock. Two round trips of its own (START TRANSACTION,
// COMMIT; three with Options.Isolation, which the driver sets before
// each transaction).
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	s.prepare(ctx)
	var opts *sql.TxOptions
	if s.iso != sql.LevelDefault {
		opts = &sql.TxOptions{Isolation: s.iso}
	}
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return s.interpretError("InTx: begin", err)
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
	}()
	if err := fn(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return s.interpretError("InTx: commit", err)
	}
	return nil
}

func errNilTx(op string) error {
	return fmt.Errorf("mysqlinbox: %s: tx is nil; pass the transaction InTx gives fn (or one you began on the same server): %w", op, inbox.ErrInvalidArgument)
}

// Record implements [inbox.Store]: it inserts the IDs not recorded yet
// with INSERT IGNORE (the server's clock, UTC) and reports which it
// inserted. An ID another transaction inserted and has not committed
// makes Record wait for that transaction's row lock (up to
// innodb_lock_wait_timeout, then an error Retryable accepts): false when
// it committed, true when it rolled back. IDs are compared byte for
// byte; an ID repeated in ids is true at most at its first place.
//
// One round trip when every ID of the call is new, or none is (the
// affected-rows count tells); two when some are: the second reads which
// rows carry the call's random token. One more of each per 1,000
// distinct IDs. An empty ID, or one over 255 bytes, gives an error
// wrapping [inbox.ErrInvalidMessage] and writes nothing.
func (s *Store) Record(ctx context.Context, tx *sql.Tx, ids []string) ([]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if tx == nil {
		return nil, errNilTx("Record")
	}
	first, uniq, err := planIDs("Record", ids)
	if err != nil {
		return nil, err
	}
	fresh := make([]bool, len(ids))
	for chunk := range slices.Chunk(uniq, maxPerStatement) {
		mine, err := s.recordChunk(ctx, tx, chunk)
		if err != nil {
			return nil, s.interpretError("Record", err)
		}
		for _, id := range mine {
			fresh[first[id]] = true
		}
	}
	return fresh, nil
}

// planIDs checks ids and returns where each first occurs and the
// distinct IDs, sorted (one lock order for every call).
func planIDs(op string, ids []string) (first map[string]int, uniq []string, err error) {
	first = make(map[string]int, len(ids))
	for i, id := range ids {
		if id == "" || len(id) > maxIDLen {
			return nil, nil, fmt.Errorf("mysqlinbox: %s: ID %d is %d bytes; an ID must be 1 to %d bytes (the outbox's limit, outbox.MaxIDLen): %w", op, i, len(id), maxIDLen, inbox.ErrInvalidMessage)
		}
		if _, ok := first[id]; !ok {
			first[id] = i
		}
	}
	uniq = make([]string, 0, len(first))
	for id := range first {
		uniq = append(uniq, id)
	}
	slices.Sort(uniq)
	return first, uniq, nil
}

// recordChunk records ids (distinct, sorted) and returns those it
// inserted.
func (s *Store) recordChunk(ctx context.Context, tx *sql.Tx, ids []string) ([]string, error) {
	if len(ids) == 1 {
		res, err := s.exec(ctx, tx, qRecordOne, []byte(ids[0]))
		if err != nil {
			return nil, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return nil, err
		}
		return ids, nil
	}
	tok := rand.Int64N(math.MaxInt64) + 1 // 0 marks rows of one-ID calls and rows written by hand
	list := hexArray(ids)
	res, err := s.exec(ctx, tx, qRecord, tok, list)
	if err != nil {
		return nil, err
	}
	n, err := res.RowsAffected()
	switch {
	case err != nil:
		return nil, err
	case n == int64(len(ids)):
		return ids, nil
	case n == 0:
		return nil, nil
	}
	rows, err := s.query(ctx, tx, qRecordMine, list, tok)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	mine := make([]string, 0, n)
	for rows.Next() {
		var id []byte
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		mine = append(mine, string(id))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(mine) != int(n) {
		return nil, fmt.Errorf("the insert recorded %d IDs but %d rows carry its token; report this as a bug", n, len(mine))
	}
	return mine, nil
}

// keyRef is one key and the SHA-256 its row is found by.
type keyRef struct {
	hash [32]byte
	key  string
}

// keyRefs hashes keys, once each, sorted by hash (one lock order for
// every call). A key over outbox.MaxKeyLen bytes is an error.
func keyRefs(op string, keys iter.Seq[string]) ([]keyRef, error) {
	seen := map[string]bool{}
	var out []keyRef
	for k := range keys {
		if seen[k] {
			continue
		}
		if len(k) > outbox.MaxKeyLen {
			return nil, fmt.Errorf("mysqlinbox: %s: a key is %d bytes; the limit is %d (outbox.MaxKeyLen): %w", op, len(k), outbox.MaxKeyLen, inbox.ErrInvalidMessage)
		}
		seen[k] = true
		out = append(out, keyRef{sha256.Sum256([]byte(k)), k})
	}
	slices.SortFunc(out, func(a, b keyRef) int { return bytes.Compare(a.hash[:], b.hash[:]) })
	return out, nil
}

// KeySeqs implements [inbox.Store]: a locking read (SELECT ... FOR
// UPDATE) of the keys' rows, which reads the newest committed numbers
// and holds the rows until tx ends, so a concurrent transaction reading
// or setting one of the keys waits. For keys without a row it inserts
// one with no number (seq NULL, read as absent; SetKeySeqs fills it in,
// a rollback removes it), held the same way: READ COMMITTED takes no
// lock on a missing row, and REPEATABLE READ's gap lock would let two
// transactions read the same missing key and then deadlock on its
// insert.
//
// One round trip when every key has a row; two when some have none;
// three when a concurrent transaction inserted one of those meanwhile
// (the third waits for it and reads its number). Per 1,000 keys. No
// keys returns an empty map; a key over 4096 bytes an error wrapping
// [inbox.ErrInvalidMessage].
func (s *Store) KeySeqs(ctx context.Context, tx *sql.Tx, keys []string) (map[string]int64, error) {
	out := make(map[string]int64, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	if tx == nil {
		return nil, errNilTx("KeySeqs")
	}
	refs, err := keyRefs("KeySeqs", slices.Values(keys))
	if err != nil {
		return nil, err
	}
	for chunk := range slices.Chunk(refs, maxPerStatement) {
		if err := s.keySeqsChunk(ctx, tx, chunk, out); err != nil {
			return nil, s.interpretError("KeySeqs", err)
		}
	}
	return out, nil
}

func (s *Store) keySeqsChunk(ctx context.Context, tx *sql.Tx, refs []keyRef, out map[string]int64) error {
	found, err := s.readKeySeqs(ctx, tx, refs, out)
	if err != nil {
		return err
	}
	var missing []keyRef
	for _, r := range refs {
		if !found[r.hash] {
			missing = append(missing, r)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	res, err := s.exec(ctx, tx, qKeySeqsLock, keyArray(missing, nil))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == int64(len(missing)) {
		return err
	}
	_, err = s.readKeySeqs(ctx, tx, missing, out)
	return err
}

// readKeySeqs reads (and locks) the rows of refs, puts the numbers set
// into out and reports which rows exist.
func (s *Store) readKeySeqs(ctx context.Context, tx *sql.Tx, refs []keyRef, out map[string]int64) (map[[32]byte]bool, error) {
	hashes := make([]string, len(refs))
	byHash := make(map[[32]byte]string, len(refs))
	for i, r := range refs {
		hashes[i] = string(r.hash[:])
		byHash[r.hash] = r.key
	}
	rows, err := s.query(ctx, tx, qKeySeqs, hexArray(hashes))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := make(map[[32]byte]bool, len(refs))
	for rows.Next() {
		var h []byte
		var seq sql.NullInt64
		if err := rows.Scan(&h, &seq); err != nil {
			return nil, err
		}
		var hash [32]byte
		copy(hash[:], h)
		found[hash] = true
		if seq.Valid {
			out[byHash[hash]] = seq.Int64
		}
	}
	return found, rows.Err()
}

// SetKeySeqs implements [inbox.Store]: one upsert per 1,000 keys (one
// round trip), in hash order, stamping each row with the server's clock
// (UTC), which Purge compares. Empty seqs does nothing.
func (s *Store) SetKeySeqs(ctx context.Context, tx *sql.Tx, seqs map[string]int64) error {
	if len(seqs) == 0 {
		return nil
	}
	if tx == nil {
		return errNilTx("SetKeySeqs")
	}
	refs, err := keyRefs("SetKeySeqs", maps.Keys(seqs))
	if err != nil {
		return err
	}
	for chunk := range slices.Chunk(refs, maxPerStatement) {
		if _, err := s.exec(ctx, tx, qSetKeySeqs, keyArray(chunk, seqs)); err != nil {
			return s.interpretError("SetKeySeqs", err)
		}
	}
	return nil
}

// SaveOffsets implements [inbox.Store]: one upsert per 1,000 partitions
// (one round trip). A partition given twice stores its last Next. A
// group or topic over 255 bytes gives an error wrapping
// [inbox.ErrInvalidArgument]. Empty offsets does nothing.
func (s *Store) SaveOffsets(ctx context.Context, tx *sql.Tx, offsets []inbox.Offset) error {
	if len(offsets) == 0 {
		return nil
	}
	if tx == nil {
		return errNilTx("SaveOffsets")
	}
	parts, err := planOffsets("SaveOffsets", offsets)
	if err != nil {
		return err
	}
	for chunk := range slices.Chunk(parts, maxPerStatement) {
		if _, err := s.exec(ctx, tx, qSaveOffsets, offsetArray(chunk)); err != nil {
			return s.interpretError("SaveOffsets", err)
		}
	}
	return nil
}

// planOffsets checks offsets and returns each partition once, with its
// last Next, sorted by group, topic and partition.
func planOffsets(op string, offsets []inbox.Offset) ([]inbox.Offset, error) {
	last := map[inbox.Offset]int64{} // by group, topic, partition (Next 0)
	for _, o := range offsets {
		if len(o.Group) > maxNameLen || len(o.Topic) > maxNameLen {
			return nil, fmt.Errorf("mysqlinbox: %s: a group or topic over %d bytes (group %d, topic %d bytes): %w", op, maxNameLen, len(o.Group), len(o.Topic), inbox.ErrInvalidArgument)
		}
		last[inbox.Offset{Group: o.Group, Topic: o.Topic, Partition: o.Partition}] = o.Next
	}
	parts := make([]inbox.Offset, 0, len(last))
	for p, next := range last {
		p.Next = next
		parts = append(parts, p)
	}
	slices.SortFunc(parts, func(a, b inbox.Offset) int {
		return cmp.Or(strings.Compare(a.Group, b.Group), strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return parts, nil
}

// Offsets implements [inbox.Store]: one query on the pool (one round
// trip), outside any transaction, reading what is committed.
func (s *Store) Offsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	s.prepare(ctx)
	args := []any{[]byte(group), []byte(topic)}
	var rows *sql.Rows
	var err error
	st := s.stmt(qOffsets)
	if st != nil {
		rows, err = st.QueryContext(ctx, args...)
	}
	if st == nil || unusableStmt(err) {
		rows, err = s.db.QueryContext(ctx, s.text[qOffsets], args...)
	}
	if err != nil {
		return nil, s.interpretError("Offsets", err)
	}
	defer rows.Close()
	out := map[int32]int64{}
	for rows.Next() {
		var p int32
		var next int64
		if err := rows.Scan(&p, &next); err != nil {
			return nil, s.interpretError("Offsets", err)
		}
		out[p] = next
	}
	if err := rows.Err(); err != nil {
		return nil, s.interpretError("Offsets", err)
	}
	return out, nil
}

// Purge implements [inbox.Store] in a READ COMMITTED transaction of its
// own (no gap locks, so it never blocks a Record inserting new IDs): it
// locks the oldest recorded IDs before the horizon with SELECT ... FOR
// UPDATE SKIP LOCKED (by applied_at_idx) and deletes them by primary key,
// then the same for the keys' numbers. A record another transaction
// holds (being written, or a duplicate being checked) is skipped. Seven
// round trips when both kinds have something to remove (SET TRANSACTION,
// START TRANSACTION, two per kind, COMMIT). limit below 1 is an error
// wrapping [inbox.ErrInvalidArgument].
func (s *Store) Purge(ctx context.Context, before time.Time, limit int) (ids, keys int, err error) {
	if limit < 1 {
		return 0, 0, fmt.Errorf("mysqlinbox: Purge: limit %d; use 1 or more: %w", limit, inbox.ErrInvalidArgument)
	}
	s.prepare(ctx)
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, 0, s.interpretError("Purge: begin", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	at := horizonMicros(before)
	ids, err = s.purge(ctx, tx, qPurgeIDs, qPurgeIDsDelete, at, limit)
	if err != nil {
		return 0, 0, s.interpretError("Purge: IDs", err)
	}
	keys, err = s.purge(ctx, tx, qPurgeKeys, qPurgeKeysDelete, at, limit)
	if err != nil {
		return 0, 0, s.interpretError("Purge: keys", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, 0, s.interpretError("Purge: commit", err)
	}
	return ids, keys, nil
}

// purge locks up to limit rows with sel and deletes them with del.
func (s *Store) purge(ctx context.Context, tx *sql.Tx, sel, del query, at int64, limit int) (int, error) {
	rows, err := s.query(ctx, tx, sel, at, limit)
	if err != nil {
		return 0, err
	}
	var pks []string
	for rows.Next() {
		var pk []byte
		if err := rows.Scan(&pk); err != nil {
			rows.Close()
			return 0, err
		}
		pks = append(pks, string(pk))
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(pks) == 0 {
		return 0, err
	}
	res, err := s.exec(ctx, tx, del, hexArray(pks))
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// DATETIME's range, as microseconds since the Unix epoch.
var (
	minDatetime = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	maxDatetime = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC).UnixMicro()
)

// horizonMicros is before as microseconds since the Unix epoch, within
// DATETIME's range (a zero time removes nothing, a far one everything).
func horizonMicros(before time.Time) int64 {
	if before.Year() < 1000 {
		return minDatetime
	}
	if before.Year() > 9999 {
		return maxDatetime
	}
	return before.UnixMicro()
}

// hexArray is items as a JSON array of hex strings (binary-safe: a JSON
// string must be UTF-8, an ID or key need not be).
func hexArray(items []string) string {
	var b strings.Builder
	b.Grow(2 + len(items)*4)
	b.WriteByte('[')
	for i, s := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		writeHex(&b, s)
	}
	b.WriteByte(']')
	return b.String()
}

func writeHex(b *strings.Builder, s string) {
	b.WriteByte('"')
	b.WriteString(hex.EncodeToString([]byte(s)))
	b.WriteByte('"')
}

// keyArray is refs as a JSON array of [hash, key] (with seqs, [hash,
// key, seq]), hex strings and a decimal string.
func keyArray(refs []keyRef, seqs map[string]int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, r := range refs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('[')
		writeHex(&b, string(r.hash[:]))
		b.WriteByte(',')
		writeHex(&b, r.key)
		if seqs != nil {
			b.WriteString(`,"`)
			b.WriteString(strconv.FormatInt(seqs[r.key], 10))
			b.WriteByte('"')
		}
		b.WriteByte(']')
	}
	b.WriteByte(']')
	return b.String()
}

// offsetArray is offs as a JSON array of [group, topic, partition,
// next].
func offsetArray(offs []inbox.Offset) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, o := range offs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('[')
		writeHex(&b, o.Group)
		b.WriteByte(',')
		writeHex(&b, o.Topic)
		fmt.Fprintf(&b, `,"%d","%d"]`, o.Partition, o.Next)
	}
	b.WriteByte(']')
	return b.String()
}
