package pginbox

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox/inbox"
)

// Store is the PostgreSQL inbox store for consumers whose handlers write
// their effects through pgx: it implements inbox.Store[pgx.Tx] on a
// *pgxpool.Pool. Make it with [New]; it is safe for concurrent use and
// holds no resources of its own (closing the pool ends it).
type Store struct {
	pool *pgxpool.Pool
	q    queries // rendered for the Options New was given
}

var (
	_ inbox.Store[pgx.Tx]  = (*Store)(nil)
	_ inbox.OldestReporter = (*Store)(nil)
)

// New returns a Store on pool for the inbox opts names. It does not touch
// the database: the tables must exist ([Migrate]) before the first
// transaction, else the methods fail with an error saying so. Errors: a
// nil pool, or opts naming an identifier PostgreSQL cannot hold.
func New(pool *pgxpool.Pool, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("pginbox: New: pool is nil; pass a *pgxpool.Pool from pgxpool.New")
	}
	return &Store{pool: pool, q: newQueries(opts)}, nil
}

// rollbackTimeout bounds the rollback InTx runs after fn failed, on a
// context that is not cancelled with the caller's (a rollback on a
// cancelled context would close the connection instead).
const rollbackTimeout = 5 * time.Second

// InTx implements inbox.Store: it begins a transaction with
// pool.BeginTx (the server's default isolation, READ COMMITTED unless
// configured otherwise), calls fn and commits when fn returns nil. When fn
// returns an error or panics it rolls back and returns fn's error
// unwrapped (or re-raises the panic). When ctx ends before the commit,
// the commit fails and pgx closes the connection, which rolls the
// transaction back; InTx returns ctx's error. Another failed commit
// returns an error wrapping pgx's; see [Store.Retryable] for which ones
// a retry may fix.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return interpretError(ctx, "InTx begin", err)
	}
	rollback := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		_ = tx.Rollback(rctx)
	}
	defer func() {
		if p := recover(); p != nil {
			rollback()
			panic(p)
		}
	}()
	if err := fn(ctx, tx); err != nil {
		rollback()
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return interpretError(ctx, "InTx commit", err)
	}
	return nil
}

// Retryable implements inbox.Store: true for the SQLSTATEs of a
// transient conflict, 40001 (serialization failure), 40P01 (deadlock) and
// 55P03 (lock not available, after lock_timeout). It is false for a
// connection that broke, at commit or before: a commit may have happened,
// so the Inbox returns the error, the message is not acknowledged, and
// its redelivery is deduplicated (or applied, if the commit did not
// happen).
func (s *Store) Retryable(err error) bool { return retryable(err) }

// Record implements inbox.Store with one statement (queries/record.sql):
// an INSERT ... ON CONFLICT DO NOTHING of the distinct IDs in byte order.
// A concurrent uncommitted insert of one of the IDs makes it wait for
// that transaction. An empty ID, or one PostgreSQL text cannot hold (NUL,
// not UTF-8), fails with an error wrapping inbox.ErrInvalidMessage before
// any round trip.
func (s *Store) Record(ctx context.Context, tx pgx.Tx, ids []string) ([]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if tx == nil {
		return nil, errNilTx("Record")
	}
	if err := checkText("Record", "ID", ids, false); err != nil {
		return nil, err
	}
	query, args := s.q.recordArgs(ids, pgxArg)
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return nil, interpretError(ctx, "Record", err)
	}
	positions, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, interpretError(ctx, "Record", err)
	}
	return recordAnswer(len(ids), positions), nil
}

// KeySeqs implements inbox.Store with one statement
// (queries/key_seqs.sql) that locks every key's row, creating a
// placeholder row (seq 0, reported as absent) for a key without one, so
// a concurrent transaction reading or setting the key waits for tx even
// when the key is new.
func (s *Store) KeySeqs(ctx context.Context, tx pgx.Tx, keys []string) (map[string]int64, error) {
	if len(keys) == 0 {
		return map[string]int64{}, nil
	}
	if tx == nil {
		return nil, errNilTx("KeySeqs")
	}
	if err := checkText("KeySeqs", "key", keys, true); err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, s.q.keySeqs, keys)
	if err != nil {
		return nil, interpretError(ctx, "KeySeqs", err)
	}
	out := make(map[string]int64, len(keys))
	var k string
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&k, &seq}, func() error {
		out[k] = seq
		return nil
	})
	if err != nil {
		return nil, interpretError(ctx, "KeySeqs", err)
	}
	return out, nil
}

// SetKeySeqs implements inbox.Store with one upsert
// (queries/set_key_seqs.sql), stamping each row with the transaction's
// now().
func (s *Store) SetKeySeqs(ctx context.Context, tx pgx.Tx, seqs map[string]int64) error {
	if len(seqs) == 0 {
		return nil
	}
	if tx == nil {
		return errNilTx("SetKeySeqs")
	}
	keys, vals := sortedSeqs(seqs)
	if err := checkText("SetKeySeqs", "key", keys, true); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, s.q.setKeySeqs, keys, vals); err != nil {
		return interpretError(ctx, "SetKeySeqs", err)
	}
	return nil
}

// SaveOffsets implements inbox.Store with one upsert
// (queries/save_offsets.sql); of several offsets of one partition, the
// last one given is stored.
func (s *Store) SaveOffsets(ctx context.Context, tx pgx.Tx, offsets []inbox.Offset) error {
	if len(offsets) == 0 {
		return nil
	}
	if tx == nil {
		return errNilTx("SaveOffsets")
	}
	c := newOffsetColumns(offsets)
	if err := checkOffsetText(c); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, s.q.saveOffsets, c.groups, c.topics, c.parts, c.nexts); err != nil {
		return interpretError(ctx, "SaveOffsets", err)
	}
	return nil
}

// Offsets implements inbox.Store with one query on the pool.
func (s *Store) Offsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	rows, err := s.pool.Query(ctx, s.q.offsets, group, topic)
	if err != nil {
		return nil, interpretError(ctx, "Offsets", err)
	}
	out := map[int32]int64{}
	var part int32
	var next int64
	if _, err := pgx.ForEachRow(rows, []any{&part, &next}, func() error {
		out[part] = next
		return nil
	}); err != nil {
		return nil, interpretError(ctx, "Offsets", err)
	}
	return out, nil
}

// Purge implements inbox.Store with one statement (queries/purge.sql,
// its own transaction) that deletes at most limit IDs and at most limit
// keys older than before, oldest first, skipping locked rows. Times are
// the database's clock (what Record and SetKeySeqs stamped with now()).
func (s *Store) Purge(ctx context.Context, before time.Time, limit int) (ids, keys int, err error) {
	if limit < 1 {
		return 0, 0, errLimit(limit)
	}
	if err := s.pool.QueryRow(ctx, s.q.purge, before, min(limit, maxPurgeLimit)).Scan(&ids, &keys); err != nil {
		return 0, 0, interpretError(ctx, "Purge", err)
	}
	return ids, keys, nil
}

// Oldest implements inbox.OldestReporter with one query on the pool
// (queries/oldest.sql): the earliest of the first entries of the
// applied_at and updated_at indexes, by the database's clock.
func (s *Store) Oldest(ctx context.Context) (time.Time, bool, error) {
	var at *time.Time
	if err := s.pool.QueryRow(ctx, s.q.oldest).Scan(&at); err != nil {
		return time.Time{}, false, interpretError(ctx, "Oldest", err)
	}
	if at == nil {
		return time.Time{}, false, nil
	}
	return *at, true, nil
}

// maxPurgeLimit caps Purge's limit at what the statement's integer
// parameter holds.
const maxPurgeLimit = 1<<31 - 1

// checkOffsetText checks SaveOffsets' text columns.
func checkOffsetText(c offsetColumns) error {
	if err := checkText("SaveOffsets", "consumer group", c.groups, true); err != nil {
		return err
	}
	return checkText("SaveOffsets", "topic", c.topics, true)
}
