package pgoutbox

import (
	"context"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/lastfetch"
)

// Compile-time checks of the interfaces Backend implements.
var (
	_ outbox.Backend[pgx.Tx] = (*Backend)(nil)
	_ outbox.Notifier        = (*Backend)(nil)
	_ outbox.Canceler        = (*Backend)(nil)
	_ outbox.Inspector       = (*Backend)(nil)
	_ outbox.Membership      = (*Backend)(nil)

	_ outbox.PartitionInspector = (*Backend)(nil)
	_ outbox.Looker             = (*Backend)(nil)
	_ outbox.BatchFetcher       = (*Backend)(nil)
	_ outbox.Prefetcher         = (*Backend)(nil)

	_ outbox.Exporter = (*Backend)(nil)
	_ outbox.Importer = (*Backend)(nil)
	_ outbox.Holder   = (*Backend)(nil)
	_ outbox.Sealer   = (*Backend)(nil)
)

//go:embed queries/*.sql
var queryFS embed.FS

// maxErrorLen is where MarkFailed truncates Failure.Error (bytes).
const maxErrorLen = 4096

// Backend is the PostgreSQL outbox backend: an [outbox.Backend] over a
// pgx pool, also an [outbox.Notifier], [outbox.Canceler],
// [outbox.Inspector], [outbox.PartitionInspector], [outbox.Looker],
// [outbox.BatchFetcher] and [outbox.Membership], for operators an
// [outbox.Lister], [outbox.Pauser] and [outbox.MemberLister] (see
// operate.go), and, for moving a live
// outbox, an [outbox.Exporter], [outbox.Importer], [outbox.Holder] and
// [outbox.Sealer] (see move.go), and, for retention, an
// [outbox.ArchiveJanitor] and [outbox.ParkedPurger] (see retention.go).
// Make one with [New]. It is safe for concurrent use.
type Backend struct {
	pool  *pgxpool.Pool
	opts  Options
	names names

	// qAppend and qAppendOne (one entry) are indexed by appendTail; with
	// Options.KeySequence they are append_keyseq.sql and
	// append_keyseq_one.sql.
	qAppend, qAppendOne                [numTails]string
	qAcquire, qRenew, qReleaseLease    string
	qFind, qMarkFailed, qRelease       string
	qParkCorrupt, qRequeueCheck        string
	qCancel, qStats, qParked, qRequeue string
	qPartitionStats, qLookup           string
	qPurge, qNotifyCommitted           string
	qOldestArchived, qPurgeParked      string
	// qPurgeTemplate is queries/purge_archive.sql with {archive} left in,
	// for one partition of a partitioned archive.
	qPurgeTemplate               string
	qHeartbeat, qLeave, qMembers string

	// Operators (operate.go): qEntries is indexed by entryStates.
	qEntries                          [len(entryStates)]string
	qBlockedKeys                      string
	qPauseTopic, qResumeTopic         string
	qPausePartition, qResumePartition string
	qPaused                           string

	// qMarkSentTID is MarkSent of entries whose row versions the last
	// fetch read; fetched remembers, per partition, the ctid of each row
	// the last fetch returned (see MarkSent).
	qMarkSentTID string
	fetched      []lastfetch.Cache[pgtype.TID]

	// archive is the archive's form with its MarkSent statements, one of
	// archiveShapes (plain, partitioned): set by New, switched by
	// redetectArchive (retention.go) when MarkSent finds the form changed.
	archive       atomic.Pointer[archiveShape]
	archiveShapes [2]archiveShape
	// ensuredUntil is the Unix time of the last day MaintainArchive made
	// sure has a partition (0: none yet).
	ensuredUntil atomic.Int64

	// qFindNext is qFind for FetchNext: it leaves out the IDs in flight
	// ($5).
	qFindNext string
	// Moving (move.go).
	qExport, qRemoveExported, qImport string
	qHold, qUnhold, qHoldState        string
	qSeal, qUnseal, qSealed           string

	// lastNotify is when (unix ns) an append was last let notify in its
	// transaction (Options.NotifyInterval).
	lastNotify atomic.Int64
	trail      *trailer

	// health is what Health keeps between calls (health.go).
	health healthState

	closed   atomic.Bool
	stop     context.CancelFunc // stops the listener
	stopCtx  context.Context
	listenMu sync.Mutex
	listener *listener
}

// New returns a Backend storing entries in the tables [Migrate] creates
// (Options.Schema and Options.Table). It reads the partition count stored
// with the outbox (one query): Options.Partitions 0 takes it, any other
// value must equal it, else New fails with an
// [*outbox.PartitionMismatchError] (whose Outbox is the quoted
// schema.table). When the outbox does not exist in Options.Schema, or was
// created before migration 004 and has no stored count, the error says so
// and how to create or update it. It also reads whether the archive is
// partitioned (one more query, of pg_partitioned_table), to archive with
// the right statement. The pool stays the caller's: Close never closes
// it.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Backend, error) {
	return newBackend(ctx, pool, opts, "")
}

// newBackend is New with the row-locking clause of the claim query, which
// the benchmarks vary (see docs/postgres.md: the chosen design locks no
// rows).
func newBackend(ctx context.Context, pool *pgxpool.Pool, opts Options, lockRows string) (*Backend, error) {
	if pool == nil {
		return nil, errors.New("pgoutbox: New: pool is nil; pass a *pgxpool.Pool from pgxpool.New")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	n := newNames(opts.Schema, opts.Table)
	stored, operators, err := readPartitions(ctx, pool, opts, n)
	if err != nil {
		return nil, err
	}
	if opts.Partitions != 0 && opts.Partitions != stored {
		return nil, fmt.Errorf("pgoutbox: New: %w", &outbox.PartitionMismatchError{Outbox: n.outbox, Configured: opts.Partitions, Stored: stored})
	}
	opts.Partitions = stored
	b := &Backend{pool: pool, opts: opts, names: n}
	b.stopCtx, b.stop = context.WithCancel(context.Background())
	partitioned, err := readArchiveShape(ctx, pool, n)
	if err != nil {
		return nil, fmt.Errorf("pgoutbox: New: reading the form of the archive %s: %w", n.archive, err)
	}
	sentReturning := "o.id"
	if opts.Archive {
		sentReturning = "o.*"
	}
	r := strings.NewReplacer("{sent_returning}", sentReturning, "{lock_rows}", lockRows,
		"{entry_columns}", strings.TrimSpace(loadQuery("entry_columns")),
		"{blocked_heads}", strings.TrimSpace(loadQuery("blocked_heads")),
		"{max_history_minus_1}", strconv.Itoa(outbox.MaxAttemptHistory-1))
	load := func(name string) string {
		return b.render(r.Replace(loadQuery(name)))
	}
	for tail, sql := range appendTails {
		tr := strings.NewReplacer("{append_tail}", sql, "{keyseq_header}", keySeqHeaderSQL)
		b.qAppend[tail] = tr.Replace(load("append_in_tx"))
		b.qAppendOne[tail] = tr.Replace(load("append_one"))
		if opts.KeySequence {
			b.qAppend[tail] = tr.Replace(load("append_keyseq"))
			b.qAppendOne[tail] = tr.Replace(load("append_keyseq_one"))
		}
	}
	if opts.KeySequence {
		if err := checkKeySeqTable(ctx, pool, n); err != nil {
			return nil, err
		}
	}
	if !operators {
		b.stop()
		return nil, fmt.Errorf("pgoutbox: New: the outbox %s was created before migration %03d (the attempt history, deferrals and pauses; %s is missing): run pgoutbox.Migrate(ctx, pool, opts) (or \"outbox migrate up\") with this schema and table before starting this version",
			n.outbox, operatorsVersion, n.pauseTopic)
	}
	b.qNotifyCommitted = load("notify_committed")
	b.trail = newTrailer(b)
	b.qAcquire = load("acquire_lease")
	b.qRenew = load("renew_lease")
	b.qReleaseLease = load("release_lease")
	b.qFind = strings.NewReplacer("{except}", "").Replace(load("find_pending_batch"))
	b.qFindNext = strings.NewReplacer("{except}", "AND o.id NOT IN (SELECT unnest($5::text[]))").Replace(load("find_pending_batch"))
	b.qExport = load("export_batch")
	b.qRemoveExported = load("remove_exported")
	b.qImport = load("import")
	b.qHold = load("hold")
	b.qUnhold = load("unhold")
	b.qHoldState = load("hold_state")
	b.qSeal = strings.NewReplacer("{outbox_literal}", quoteLiteral(n.outbox),
		"{keyseq_literal}", quoteLiteral(n.keyseq), "{trigger_literal}", quoteLiteral(opts.Table+"_sealed")).Replace(load("seal"))
	b.qUnseal = load("unseal")
	b.qSealed = load("sealed")
	for i, insert := range archiveInserts(opts.Archive) {
		ar := strings.NewReplacer("{archive_insert}", b.render(insert))
		b.archiveShapes[i] = archiveShape{partitioned: i == 1,
			markSent: ar.Replace(load("mark_sent")), markSentTID: ar.Replace(load("mark_sent_tid"))}
	}
	b.archive.Store(&b.archiveShapes[boolIndex(partitioned)])
	b.fetched = make([]lastfetch.Cache[pgtype.TID], opts.Partitions)
	b.qMarkFailed = load("mark_failed")
	b.qParkCorrupt = load("park_corrupt")
	b.qRequeueCheck = load("requeue_check")
	b.qRelease = load("release")
	b.qCancel = load("cancel")
	b.qStats = load("stats")
	b.qParked = load("parked")
	b.qRequeue = load("requeue")
	b.qPartitionStats = load("partition_stats")
	b.qLookup = load("lookup")
	b.qMembers = load("members")
	b.loadOperatorQueries(load)
	b.qPurge = load("purge_archive")
	b.qPurgeTemplate = loadQuery("purge_archive")
	b.qOldestArchived = load("oldest_archived")
	b.qPurgeParked = load("purge_parked")
	b.qHeartbeat = load("heartbeat")
	b.qLeave = load("leave")
	return b, nil
}

// archiveInserts returns the archive inserts of MarkSent (the
// {archive_insert} of queries/mark_sent.sql and mark_sent_tid.sql) for a
// plain archive and for a partitioned one; both "" without the archive.
// In a plain archive an ID sent twice (appended again after its first
// delivery, as the SPI allows) keeps the row of its latest delivery (ON
// CONFLICT on its primary key). A partitioned archive has no unique index
// on id (a unique index must hold the partition key), so each delivery
// adds a row.
func archiveInserts(archive bool) [2]string {
	if !archive {
		return [2]string{}
	}
	const insert = `, a AS (
    INSERT INTO {archive} AS a (seq, id, partition, topic, key, payload, headers, not_before,
                                created_at, attempts, last_error, sent_at, history)
    SELECT seq, id, partition, topic, key, payload, headers, not_before,
           created_at, attempts, last_error, now(), history
    FROM d`
	return [2]string{insert + `
    ON CONFLICT (id) DO UPDATE
    SET seq = EXCLUDED.seq, partition = EXCLUDED.partition, topic = EXCLUDED.topic,
        key = EXCLUDED.key, payload = EXCLUDED.payload, headers = EXCLUDED.headers,
        not_before = EXCLUDED.not_before, created_at = EXCLUDED.created_at,
        attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
        sent_at = EXCLUDED.sent_at, history = EXCLUDED.history
)`, insert + `
)`}
}

// loadQuery returns an embedded query, unrendered.
func loadQuery(name string) string {
	s, err := queryFS.ReadFile("queries/" + name + ".sql")
	if err != nil {
		panic("pgoutbox: embedded query missing: " + name)
	}
	return string(s)
}

// readPartitions reads the partition count stored with the outbox and
// whether its paused-topic table (migration 007) exists
// (queries/partitions.sql, one query). When that fails because a table is
// missing, a second query tells a missing outbox from one created before migration 004, for the
// error message.
func readPartitions(ctx context.Context, pool *pgxpool.Pool, opts Options, n names) (int, bool, error) {
	var count int
	var operators bool
	err := pool.QueryRow(ctx, strings.ReplaceAll(loadQuery("partitions"), "{meta}", n.meta), n.pauseTopic).Scan(&count, &operators)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return count, operators, nil
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, fmt.Errorf("pgoutbox: New: the outbox %s has no stored partition count (%s is empty): run pgoutbox.Migrate(ctx, pool, opts) with Options.Partitions set to the count its appenders and relays use",
			n.outbox, n.meta)
	case errors.As(err, &pgErr) && (pgErr.Code == "26000" || pgErr.Code == "42P05"):
		return 0, false, preparedStatementError("New", err)
	case !errors.As(err, &pgErr) || (pgErr.Code != "42P01" && pgErr.Code != "3F000"): // undefined_table, invalid_schema_name
		return 0, false, fmt.Errorf("pgoutbox: New: reading the partition count of %s: %w", n.outbox, err)
	}
	var exists bool
	if err2 := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", n.outbox).Scan(&exists); err2 == nil && exists {
		return 0, false, fmt.Errorf("pgoutbox: New: the outbox %s was created before migration %03d and has no stored partition count: run pgoutbox.Migrate(ctx, pool, opts) with Options.Partitions set to the count its appenders and relays use (or \"outbox migrate up --partitions N\" with this schema and table): %w",
			n.outbox, partitionsVersion, err)
	}
	return 0, false, fmt.Errorf("pgoutbox: New: the outbox does not exist: there is no table %s in schema %s: create it with pgoutbox.Migrate(ctx, pool, pgoutbox.Options{Schema: %q, Table: %q, Partitions: N}) or \"outbox migrate up --partitions N\" with this schema and table, or check Options.Schema and Options.Table: %w",
		pgx.Identifier{opts.Table}.Sanitize(), pgx.Identifier{opts.Schema}.Sanitize(), opts.Schema, opts.Table, err)
}

// render replaces the table tokens of a query with quoted identifiers.
func (b *Backend) render(q string) string {
	return strings.NewReplacer("{outbox}", b.names.outbox, "{lease}", b.names.lease, "{archive}", b.names.archive,
		"{meta}", b.names.meta, "{member}", b.names.member, "{keyseq}", b.names.keyseq,
		"{hold}", b.names.hold, "{seal_fn}", b.names.sealFn, "{seal_trigger}", b.names.sealTrigger,
		"{pause_topic}", b.names.pauseTopic, "{pause_part}", b.names.pausePart).Replace(q)
}

// keySeqHeaderSQL is the start of the encoded outbox.HeaderKeySeq header
// (see EncodeHeaders) as a bytea literal: uvarint(len(name)) and the name.
// append_keyseq.sql appends the value's length and the value.
var keySeqHeaderSQL = func() string {
	enc := EncodeHeaders(map[string]string{outbox.HeaderKeySeq: ""})
	return `'\x` + hex.EncodeToString(enc[:len(enc)-1]) + `'::bytea`
}()

// checkKeySeqTable checks, for Options.KeySequence, that the counter table
// of migration 005 exists.
func checkKeySeqTable(ctx context.Context, pool *pgxpool.Pool, n names) error {
	var exists bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", n.keyseq).Scan(&exists); err != nil {
		return fmt.Errorf("pgoutbox: New: checking the key sequence table %s: %w", n.keyseq, err)
	}
	if !exists {
		return fmt.Errorf("pgoutbox: New: Options.KeySequence needs the table %s, which migration %03d creates: run pgoutbox.Migrate(ctx, pool, opts) (or \"outbox migrate up\") with this schema and table",
			n.keyseq, keySeqVersion)
	}
	return nil
}

// keySeqVersion is the migration that creates the key sequence table.
const keySeqVersion = 5

// Partitions reports the partition count stored with the outbox (which
// Options.Partitions, when set, equals).
func (b *Backend) Partitions() int { return b.opts.Partitions }

// Close stops the notification listener and makes every method return
// [outbox.ErrClosed]. It never closes the pool. It is idempotent.
func (b *Backend) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	b.stop()
	b.trail.close()
	b.listenMu.Lock()
	l := b.listener
	b.listenMu.Unlock()
	if l != nil {
		l.wait()
	}
	return nil
}

func (b *Backend) checkOpen(op string) error {
	if b.closed.Load() {
		return fmt.Errorf("pgoutbox: %s: %w", op, outbox.ErrClosed)
	}
	return nil
}

// AppendInTx inserts entries as part of tx in one statement (one round
// trip): a multi-row INSERT from arrays (a single-row one for one entry)
// with ON CONFLICT (id) DO NOTHING. When it inserted rows, the relays are
// told after commit by a NOTIFY on Options.Channel whose payload lists the
// partitions of the inserted rows: sent in tx itself by at most one
// appending transaction per Options.NotifyInterval, and for the others by
// a trailing NOTIFY the Backend sends from a connection of its own once it
// sees their transaction committed (never for a rolled-back one). See
// Options.NoNotify, [Backend.Notifications] and [outbox.Backend.AppendInTx]
// for the contract. With Options.KeyLocks it first locks the call's keys
// for the rest of tx (one more statement), so concurrent appends of one key
// deliver in append order. With Options.KeySequence the same statement
// also numbers the entries of each key in the [outbox.HeaderKeySeq]
// header (see Options.KeySequence).
//
// Besides the rules of [outbox.PrepareEntries], a Topic with a NUL byte
// (which PostgreSQL text cannot hold) is rejected with
// [outbox.ErrInvalidEntry]. Keys, payloads and headers are stored as bytes
// and may hold anything.
func (b *Backend) AppendInTx(ctx context.Context, tx pgx.Tx, entries ...outbox.Entry) error {
	if err := b.checkOpen("AppendInTx"); err != nil {
		return err
	}
	if len(entries) == 0 {
		return nil
	}
	if tx == nil {
		return fmt.Errorf("pgoutbox: AppendInTx: tx is nil; pass the pgx.Tx of your transaction: %w", outbox.ErrInvalidArgument)
	}
	rows, err := b.appendRows(ctx, entries)
	if err != nil {
		return err
	}
	if locks := b.keyLocks(rows.keys); locks != nil {
		if _, err := tx.Exec(ctx, keyLocksSQL, locks); err != nil {
			return b.interpretError("AppendInTx", err)
		}
	}
	q, args := &b.qAppend, rows.arrays()
	if len(rows.ids) == 1 {
		q, args = &b.qAppendOne, rows.row(0)
	}
	return b.runAppend("AppendInTx", q, args, true,
		func(sql string, args []any) error {
			_, err := tx.Exec(ctx, sql, args...)
			return err
		},
		func(sql string, args []any) (int64, string, error) {
			var xid int64
			var parts string
			err := tx.QueryRow(ctx, sql, args...).Scan(&xid, &parts)
			if errors.Is(err, pgx.ErrNoRows) {
				err = errNothingInserted
			}
			return xid, parts, err
		})
}

// errNothingInserted is what a trailing append's query function returns
// when the append inserted no row (every ID was already there).
var errNothingInserted = errors.New("pgoutbox: append inserted nothing")

// runAppend runs an append statement (q, one per appendTail) with args
// ($1..$7) through the caller's transaction, with the tail chooseTail
// picks: exec runs it when it notifies in the transaction or not at all;
// queryXID runs it when it returns the transaction ID and the inserted
// rows' partitions (comma-separated) for the trailer (errNothingInserted
// when no row was inserted: nothing to tell). canTrail reports whether
// queryXID can be used.
func (b *Backend) runAppend(op string, q *[numTails]string, args []any, canTrail bool,
	exec func(sql string, args []any) error, queryXID func(sql string, args []any) (int64, string, error)) error {
	tail := b.chooseTail(canTrail)
	if tail != tailTrail {
		if tail == tailNotify {
			args = append(args, b.opts.Channel)
		}
		return b.interpretError(op, exec(q[tail], args))
	}
	switch xid, parts, err := queryXID(q[tail], args); {
	case errors.Is(err, errNothingInserted):
		return nil
	case err != nil:
		return b.interpretError(op, err)
	default:
		b.trail.add(xid, parsePartitions(parts))
		return nil
	}
}

// parsePartitions parses a comma-separated list of partitions, as the
// trailing tail returns it. Anything it cannot parse becomes the single
// partition -1, which the listener turns into [outbox.AllPartitions].
func parsePartitions(s string) []int32 {
	fields := strings.Split(s, ",")
	out := make([]int32, 0, len(fields))
	for _, f := range fields {
		p, err := strconv.ParseInt(f, 10, 32)
		if err != nil || p < 0 {
			return []int32{-1}
		}
		out = append(out, int32(p))
	}
	return out
}

// appendTail is the last step of an append statement.
type appendTail int

const (
	// tailQuiet: no notification (Options.NoNotify).
	tailQuiet appendTail = iota
	// tailNotify: pg_notify in the appending transaction ($8 the channel),
	// the payload listing the inserted rows' partitions.
	tailNotify
	// tailTrail: return the transaction's ID and the inserted rows'
	// partitions for a trailing notification.
	tailTrail
	numTails
)

// notifyChunk is how many partitions one NOTIFY payload lists at most:
// 700 numbers of up to 10 digits and their commas stay below PostgreSQL's
// 8000-byte payload limit; more partitions are split over several
// notifications. notify_committed.sql uses the same number.
const notifyChunk = 700

// appendTails are the SQL of each appendTail; each acts only when the
// append inserted a row. The ins step returns the partition of each
// inserted row.
var appendTails = [numTails]string{
	tailQuiet: "SELECT 1 FROM ins LIMIT 1",
	tailNotify: `SELECT pg_notify($8, string_agg(p::text, ',' ORDER BY p))
FROM (SELECT p, (row_number() OVER (ORDER BY p) - 1) / ` + strconv.Itoa(notifyChunk) + ` AS chunk
      FROM (SELECT DISTINCT partition AS p FROM ins) AS d) AS c
GROUP BY chunk`,
	tailTrail: `SELECT pg_current_xact_id()::text::bigint, string_agg(DISTINCT partition::text, ',')
FROM ins
HAVING count(*) > 0`,
}

// chooseTail picks how an append notifies. canTrail reports whether the
// caller can read the transaction ID back. At most one append per
// Options.NotifyInterval notifies in its transaction; the others are
// covered by the trailer.
func (b *Backend) chooseTail(canTrail bool) appendTail {
	switch {
	case b.opts.NoNotify:
		return tailQuiet
	case !canTrail || b.opts.NotifyInterval < 0:
		return tailNotify
	}
	now := time.Now().UnixNano()
	last := b.lastNotify.Load()
	if now-last >= int64(b.opts.NotifyInterval) && b.lastNotify.CompareAndSwap(last, now) {
		return tailNotify
	}
	return tailTrail
}

// appendRows holds the columns of the rows an append inserts.
type appendRows struct {
	ids, topics             []string
	parts                   []int32
	keys, payloads, headers [][]byte
	notBefore               []pgtype.Timestamptz
}

// arrays returns the parameters $1..$7 of append_in_tx.sql.
func (r appendRows) arrays() []any {
	return []any{r.ids, r.parts, r.topics, r.keys, r.payloads, r.headers, r.notBefore}
}

// row returns the parameters $1..$7 of append_one.sql for row i.
func (r appendRows) row(i int) []any {
	return []any{r.ids[i], r.parts[i], r.topics[i], r.keys[i], r.payloads[i], r.headers[i], r.notBefore[i]}
}

// appendRows prepares and validates entries and returns the columns of
// their rows.
func (b *Backend) appendRows(ctx context.Context, entries []outbox.Entry) (appendRows, error) {
	if b.opts.KeySequence {
		if err := outbox.CheckKeySeqHeaders(entries); err != nil {
			return appendRows{}, fmt.Errorf("pgoutbox: AppendInTx: %w", err)
		}
	}
	prepared, err := outbox.PrepareEntriesWith(ctx, entries, b.opts.Partitions, b.opts.Limits)
	if err != nil {
		return appendRows{}, fmt.Errorf("pgoutbox: AppendInTx: %w", err)
	}
	n := len(prepared)
	ids := make([]string, n)
	parts := make([]int32, n)
	topics := make([]string, n)
	keys := make([][]byte, n)
	payloads := make([][]byte, n)
	headers := make([][]byte, n)
	notBefore := make([]pgtype.Timestamptz, n)
	for i, e := range prepared {
		if err := checkText(e); err != nil {
			return appendRows{}, fmt.Errorf("pgoutbox: AppendInTx: %w: entry %d (id %q): %s", outbox.ErrInvalidEntry, i, e.ID, err)
		}
		ids[i], parts[i], topics[i] = e.ID, int32(e.Partition), e.Topic
		keys[i] = []byte(e.Key)
		payloads[i] = e.Payload
		headers[i] = EncodeHeaders(e.Headers)
		if !e.NotBefore.IsZero() {
			notBefore[i] = pgtype.Timestamptz{Time: e.NotBefore, Valid: true}
		}
	}
	return appendRows{ids: ids, parts: parts, topics: topics, keys: keys, payloads: payloads, headers: headers, notBefore: notBefore}, nil
}

// keyLocksSQL takes the advisory locks of Options.KeyLocks in the order
// of $1 (sorted by keyLocks).
const keyLocksSQL = `SELECT pg_advisory_xact_lock(k) FROM unnest($1::int8[]) WITH ORDINALITY AS u(k, o) ORDER BY o`

// keyLocks returns the sorted, distinct advisory lock IDs of the non-empty
// keys, or nil when Options.KeyLocks is off or no key is set.
func (b *Backend) keyLocks(keys [][]byte) []int64 {
	if !b.opts.KeyLocks {
		return nil
	}
	var ids []int64
	for _, k := range keys {
		if len(k) == 0 {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(b.opts.Schema))
		h.Write([]byte{0})
		h.Write([]byte(b.opts.Table))
		h.Write([]byte{0})
		h.Write(k)
		ids = append(ids, int64(h.Sum64()))
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// checkText rejects what PostgreSQL text cannot store.
func checkText(e outbox.Entry) error {
	if strings.ContainsRune(e.Topic, 0) {
		return errors.New("Topic contains a NUL byte, which PostgreSQL text cannot store")
	}
	return nil
}

// interpretError maps PostgreSQL and pgx errors to the package's errors,
// in one place. Context errors stay checkable with errors.Is.
func (b *Backend) interpretError(op string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", "3F000": // undefined_table, invalid_schema_name
			return fmt.Errorf("pgoutbox: %s: the outbox tables %s do not exist: run pgoutbox.Migrate(ctx, pool, opts) with the same Schema and Table, or apply pgoutbox.Migrations with your migration tool: %w",
				op, b.names.outbox, err)
		case "42703", "428C9": // undefined_column; generated_always (seq before migration 3)
			return fmt.Errorf("pgoutbox: %s: the outbox table %s has an older layout: run pgoutbox.Migrate to bring it up to date: %w", op, b.names.outbox, err)
		case "23505": // unique_violation
			if b.opts.KeySequence && pgErr.ConstraintName == b.opts.Table+"_pkey" {
				return fmt.Errorf("pgoutbox: %s: an entry's ID was appended by a concurrent transaction that committed while this one waited (with Options.KeySequence the append fails instead of skipping the entry, which would leave its key sequence number unused): roll back and retry the transaction; the retry finds the entry and appends nothing for it: %w", op, err)
			}
		case sealedSQLState: // raised by the seal trigger (move.go)
			return fmt.Errorf("pgoutbox: %s: the outbox %s is sealed: it was moved to another outbox (outbox move); append to its destination instead, or unseal it (outbox move --unseal) to append here again: %w",
				op, b.names.outbox, outbox.ErrSealed)
		case "26000", "42P05": // invalid_sql_statement_name, duplicate_prepared_statement
			// pgx prepares and caches statements per connection by
			// default; behind a transaction-pooling PgBouncer the next
			// transaction of that connection runs on another server
			// connection, without them (or with another client's).
			return preparedStatementError(op, err)
		}
	}
	return fmt.Errorf("pgoutbox: %s: %w", op, err)
}

// preparedStatementError explains SQLSTATE 26000 and 42P05 behind a
// transaction-pooling PgBouncer.
func preparedStatementError(op string, err error) error {
	return fmt.Errorf("pgoutbox: %s: a statement pgx prepared on this connection is missing on the server connection (or another client prepared it there): a pooler in transaction mode, such as PgBouncer, gives each transaction another server connection. Add default_query_exec_mode=simple_protocol (or exec) to the connection URL, or set pgx.ConnConfig.DefaultQueryExecMode to pgx.QueryExecModeSimpleProtocol (or QueryExecModeExec); see docs/postgres.md, \"PgBouncer\": %w", op, err)
}

func leaseLost(op string, l outbox.Lease) error {
	return fmt.Errorf("pgoutbox: %s: partition %d, owner %q, version %d: %w", op, l.Partition, l.Owner, l.Version, outbox.ErrLeaseLost)
}

// micros converts a positive TTL to whole microseconds, rounding up.
func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// delayMicros converts a retry delay to whole microseconds, rounding away
// from zero: a positive delay never comes early, a negative one stays in
// the past.
func delayMicros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	switch rem := d % time.Microsecond; {
	case rem > 0:
		us++
	case rem < 0:
		us--
	}
	return us
}

// argErr wraps an argument check's error with the package and operation.
func argErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("pgoutbox: %s: %w", op, err)
}
