package pgoutbox

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
)

// Compile-time checks of the interfaces Backend implements.
var (
	_ outbox.Backend[pgx.Tx] = (*Backend)(nil)
	_ outbox.Notifier        = (*Backend)(nil)
	_ outbox.Canceler        = (*Backend)(nil)
	_ outbox.Inspector       = (*Backend)(nil)
)

//go:embed queries/*.sql
var queryFS embed.FS

// maxErrorLen is where MarkFailed truncates Failure.Error (bytes).
const maxErrorLen = 4096

// Backend is the PostgreSQL outbox backend: an [outbox.Backend] over a
// pgx pool, also an [outbox.Notifier], [outbox.Canceler] and
// [outbox.Inspector]. Make one with [New]. It is safe for concurrent use.
type Backend struct {
	pool  *pgxpool.Pool
	opts  Options
	names names

	// qAppend and qAppendOne (one entry) are indexed by appendTail.
	qAppend, qAppendOne                     [numTails]string
	qAcquire, qRenew, qReleaseLease         string
	qFind, qMarkSent, qMarkFailed, qRelease string
	qCancel, qStats, qParked, qRequeue      string
	qPurge, qNotifyCommitted                string

	// lastNotify is when (unix ns) an append was last let notify in its
	// transaction (Options.NotifyInterval).
	lastNotify atomic.Int64
	trail      *trailer

	closed   atomic.Bool
	stop     context.CancelFunc // stops the listener
	stopCtx  context.Context
	listenMu sync.Mutex
	listener *listener
}

// New returns a Backend storing entries in the tables [Migrate] creates
// (Options.Schema and Options.Table). It does not touch the database: a
// missing table is reported by the first call, with an error that says to
// run Migrate. The pool stays the caller's: Close never closes it.
func New(pool *pgxpool.Pool, opts Options) (*Backend, error) {
	return newBackend(pool, opts, "")
}

// newBackend is New with the row-locking clause of the claim query, which
// the benchmarks vary (see docs/postgres.md: the chosen design locks no
// rows).
func newBackend(pool *pgxpool.Pool, opts Options, lockRows string) (*Backend, error) {
	if pool == nil {
		return nil, errors.New("pgoutbox: New: pool is nil; pass a *pgxpool.Pool from pgxpool.New")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Backend{pool: pool, opts: opts, names: newNames(opts.Schema, opts.Table)}
	b.stopCtx, b.stop = context.WithCancel(context.Background())
	archiveInsert := ""
	if opts.Archive {
		// An ID sent twice (appended again after its first delivery, as
		// the SPI allows) keeps the row of its latest delivery.
		archiveInsert = `, a AS (
    INSERT INTO {archive} AS a (seq, id, partition, topic, key, payload, headers, not_before,
                                created_at, attempts, last_error, sent_at)
    SELECT seq, id, partition, topic, key, payload, headers, not_before,
           created_at, attempts, last_error, now()
    FROM d
    ON CONFLICT (id) DO UPDATE
    SET seq = EXCLUDED.seq, partition = EXCLUDED.partition, topic = EXCLUDED.topic,
        key = EXCLUDED.key, payload = EXCLUDED.payload, headers = EXCLUDED.headers,
        not_before = EXCLUDED.not_before, created_at = EXCLUDED.created_at,
        attempts = EXCLUDED.attempts, last_error = EXCLUDED.last_error,
        sent_at = EXCLUDED.sent_at
)`
	}
	r := strings.NewReplacer("{archive_insert}", archiveInsert, "{lock_rows}", lockRows)
	load := func(name string) string {
		s, err := queryFS.ReadFile("queries/" + name + ".sql")
		if err != nil {
			panic("pgoutbox: embedded query missing: " + name)
		}
		return b.render(r.Replace(string(s)))
	}
	for tail, sql := range appendTails {
		tr := strings.NewReplacer("{append_tail}", sql)
		b.qAppend[tail] = tr.Replace(load("append_in_tx"))
		b.qAppendOne[tail] = tr.Replace(load("append_one"))
	}
	b.qNotifyCommitted = load("notify_committed")
	b.trail = newTrailer(b)
	b.qAcquire = load("acquire_lease")
	b.qRenew = load("renew_lease")
	b.qReleaseLease = load("release_lease")
	b.qFind = load("find_pending_batch")
	b.qMarkSent = load("mark_sent")
	b.qMarkFailed = load("mark_failed")
	b.qRelease = load("release")
	b.qCancel = load("cancel")
	b.qStats = load("stats")
	b.qParked = load("parked")
	b.qRequeue = load("requeue")
	b.qPurge = load("purge_archive")
	return b, nil
}

// render replaces the table tokens of a query with quoted identifiers.
func (b *Backend) render(q string) string {
	return strings.NewReplacer("{outbox}", b.names.outbox, "{lease}", b.names.lease, "{archive}", b.names.archive).Replace(q)
}

// Partitions reports Options.Partitions.
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
// with ON CONFLICT (id) DO NOTHING. When it inserted a row, the relays are
// told after commit by a NOTIFY on Options.Channel: sent in tx itself by at
// most one appending transaction per Options.NotifyInterval, and for the
// others by a trailing NOTIFY the Backend sends from the pool once it sees
// their transaction committed (never for a rolled-back one). See
// Options.NoNotify and [outbox.Backend.AppendInTx] for the contract.
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
	q, args := &b.qAppend, rows.arrays()
	if len(rows.ids) == 1 {
		q, args = &b.qAppendOne, rows.row(0)
	}
	return b.runAppend("AppendInTx", q, args, true,
		func(sql string, args []any) error {
			_, err := tx.Exec(ctx, sql, args...)
			return err
		},
		func(sql string, args []any) (int64, error) {
			var xid int64
			err := tx.QueryRow(ctx, sql, args...).Scan(&xid)
			if errors.Is(err, pgx.ErrNoRows) {
				err = errNothingInserted
			}
			return xid, err
		})
}

// errNothingInserted is what a trailing append's query function returns
// when the append inserted no row (every ID was already there).
var errNothingInserted = errors.New("pgoutbox: append inserted nothing")

// runAppend runs an append statement (q, one per appendTail) with args
// ($1..$7) through the caller's transaction, with the tail chooseTail
// picks: exec runs it when it notifies in the transaction or not at all;
// queryXID runs it when it returns the transaction ID for the trailer
// (errNothingInserted when no row was inserted: nothing to tell). canTrail
// reports whether queryXID can be used.
func (b *Backend) runAppend(op string, q *[numTails]string, args []any, canTrail bool,
	exec func(sql string, args []any) error, queryXID func(sql string, args []any) (int64, error)) error {
	tail := b.chooseTail(canTrail)
	if tail != tailTrail {
		if tail == tailNotify {
			args = append(args, b.opts.Channel)
		}
		return b.interpretError(op, exec(q[tail], args))
	}
	switch xid, err := queryXID(q[tail], args); {
	case errors.Is(err, errNothingInserted):
		return nil
	case err != nil:
		return b.interpretError(op, err)
	default:
		b.trail.add(xid)
		return nil
	}
}

// appendTail is the last step of an append statement.
type appendTail int

const (
	// tailQuiet: no notification (Options.NoNotify).
	tailQuiet appendTail = iota
	// tailNotify: pg_notify in the appending transaction ($8 the channel).
	tailNotify
	// tailTrail: return the transaction's ID for a trailing notification.
	tailTrail
	numTails
)

// appendTails are the SQL of each appendTail; each acts only when the
// append inserted a row.
var appendTails = [numTails]string{
	tailQuiet:  "SELECT 1 FROM ins LIMIT 1",
	tailNotify: "SELECT pg_notify($8, '') FROM (SELECT 1 FROM ins LIMIT 1) AS inserted",
	tailTrail:  "SELECT pg_current_xact_id()::text::bigint FROM (SELECT 1 FROM ins LIMIT 1) AS inserted",
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
	prepared, err := outbox.PrepareEntries(ctx, entries, b.opts.Partitions)
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
		}
	}
	return fmt.Errorf("pgoutbox: %s: %w", op, err)
}

func leaseLost(op string, l outbox.Lease) error {
	return fmt.Errorf("pgoutbox: %s: partition %d, owner %q, version %d: %w", op, l.Partition, l.Owner, l.Version, outbox.ErrLeaseLost)
}

func (b *Backend) checkPartition(op string, p int) error {
	if p < 0 || p >= b.opts.Partitions {
		return fmt.Errorf("pgoutbox: %s: partition %d is out of range [0, %d): %w", op, p, b.opts.Partitions, outbox.ErrInvalidArgument)
	}
	return nil
}

// micros converts a positive TTL to whole microseconds, rounding up.
func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}
