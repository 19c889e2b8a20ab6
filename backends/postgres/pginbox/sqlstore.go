package pginbox

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/outboxrelay/outbox/inbox"
)

// SQLStore is the PostgreSQL inbox store for consumers whose handlers
// write their effects through database/sql: it implements
// inbox.Store[*sql.Tx] on a *sql.DB. It runs the same statements as
// [Store], passing arrays as PostgreSQL array literals in strings, so it
// works with pgx's stdlib driver ("pgx", the one it is tested with) and
// with other PostgreSQL drivers such as lib/pq. Make it with [NewSQL]; it
// is safe for concurrent use and holds no resources of its own.
type SQLStore struct {
	db *sql.DB
	q  queries // rendered for the Options NewSQL was given
}

var (
	_ inbox.Store[*sql.Tx] = (*SQLStore)(nil)
	_ inbox.OldestReporter = (*SQLStore)(nil)
)

// NewSQL returns an SQLStore on db (a PostgreSQL database, such as
// sql.Open("pgx", url) with github.com/jackc/pgx/v5/stdlib imported) for
// the inbox opts names. It does not touch the database: create the tables
// with [Migrate] (or the files of [Migrations]) first. Errors: a nil db,
// or opts naming an identifier PostgreSQL cannot hold.
func NewSQL(db *sql.DB, opts Options) (*SQLStore, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errors.New("pginbox: NewSQL: db is nil; pass a *sql.DB from sql.Open(\"pgx\", url)")
	}
	return &SQLStore{db: db, q: newQueries(opts)}, nil
}

// InTx implements inbox.Store with db.BeginTx (default options): it calls
// fn, commits when fn returns nil, and rolls back when fn returns an
// error (returned unwrapped) or panics (re-raised). When ctx ends before
// the commit, database/sql rolls the transaction back and InTx returns
// ctx's error.
func (s *SQLStore) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return interpretError(ctx, "InTx begin", err)
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
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, sql.ErrTxDone) {
			// database/sql rolled the transaction back when ctx ended.
			return ctxErr
		}
		return interpretError(ctx, "InTx commit", err)
	}
	return nil
}

// Retryable implements inbox.Store as [Store.Retryable] does (the
// SQLSTATEs 40001, 40P01 and 55P03; never a broken connection, such as
// database/sql's driver.ErrBadConn at commit, whose outcome is unknown).
func (s *SQLStore) Retryable(err error) bool { return retryable(err) }

// Record implements inbox.Store as [Store.Record] does.
func (s *SQLStore) Record(ctx context.Context, tx *sql.Tx, ids []string) ([]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if tx == nil {
		return nil, errNilTx("Record")
	}
	if err := checkText("Record", "ID", ids, false); err != nil {
		return nil, err
	}
	query, args := s.q.recordArgs(ids, sqlArg)
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, interpretError(ctx, "Record", err)
	}
	var positions []int64
	err = scanRows(rows, func() error {
		var p int64
		err := rows.Scan(&p)
		positions = append(positions, p)
		return err
	})
	if err != nil {
		return nil, interpretError(ctx, "Record", err)
	}
	return recordAnswer(len(ids), positions), nil
}

// KeySeqs implements inbox.Store as [Store.KeySeqs] does.
func (s *SQLStore) KeySeqs(ctx context.Context, tx *sql.Tx, keys []string) (map[string]int64, error) {
	if len(keys) == 0 {
		return map[string]int64{}, nil
	}
	if tx == nil {
		return nil, errNilTx("KeySeqs")
	}
	if err := checkText("KeySeqs", "key", keys, true); err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, s.q.keySeqs, textArray(keys))
	if err != nil {
		return nil, interpretError(ctx, "KeySeqs", err)
	}
	out := make(map[string]int64, len(keys))
	err = scanRows(rows, func() error {
		var k string
		var seq int64
		err := rows.Scan(&k, &seq)
		out[k] = seq
		return err
	})
	if err != nil {
		return nil, interpretError(ctx, "KeySeqs", err)
	}
	return out, nil
}

// SetKeySeqs implements inbox.Store as [Store.SetKeySeqs] does.
func (s *SQLStore) SetKeySeqs(ctx context.Context, tx *sql.Tx, seqs map[string]int64) error {
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
	if _, err := tx.ExecContext(ctx, s.q.setKeySeqs, textArray(keys), intArray(vals)); err != nil {
		return interpretError(ctx, "SetKeySeqs", err)
	}
	return nil
}

// SaveOffsets implements inbox.Store as [Store.SaveOffsets] does.
func (s *SQLStore) SaveOffsets(ctx context.Context, tx *sql.Tx, offsets []inbox.Offset) error {
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
	parts := make([]int64, len(c.parts))
	for i, p := range c.parts {
		parts[i] = int64(p)
	}
	if _, err := tx.ExecContext(ctx, s.q.saveOffsets, textArray(c.groups), textArray(c.topics), intArray(parts), intArray(c.nexts)); err != nil {
		return interpretError(ctx, "SaveOffsets", err)
	}
	return nil
}

// Offsets implements inbox.Store as [Store.Offsets] does, on db.
func (s *SQLStore) Offsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	rows, err := s.db.QueryContext(ctx, s.q.offsets, group, topic)
	if err != nil {
		return nil, interpretError(ctx, "Offsets", err)
	}
	out := map[int32]int64{}
	err = scanRows(rows, func() error {
		var part int32
		var next int64
		err := rows.Scan(&part, &next)
		out[part] = next
		return err
	})
	if err != nil {
		return nil, interpretError(ctx, "Offsets", err)
	}
	return out, nil
}

// Purge implements inbox.Store as [Store.Purge] does, on db.
func (s *SQLStore) Purge(ctx context.Context, before time.Time, limit int) (ids, keys int, err error) {
	if limit < 1 {
		return 0, 0, errLimit(limit)
	}
	if err := s.db.QueryRowContext(ctx, s.q.purge, before, min(limit, maxPurgeLimit)).Scan(&ids, &keys); err != nil {
		return 0, 0, interpretError(ctx, "Purge", err)
	}
	return ids, keys, nil
}

// Oldest implements inbox.OldestReporter as [Store.Oldest] does, on db.
func (s *SQLStore) Oldest(ctx context.Context) (time.Time, bool, error) {
	var at sql.NullTime
	if err := s.db.QueryRowContext(ctx, s.q.oldest).Scan(&at); err != nil {
		return time.Time{}, false, interpretError(ctx, "Oldest", err)
	}
	return at.Time, at.Valid, nil
}

// scanRows calls scan for each row, then closes rows and returns the
// first error.
func scanRows(rows *sql.Rows, scan func() error) error {
	defer rows.Close()
	for rows.Next() {
		if err := scan(); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// textArray is v as a PostgreSQL array literal of quoted elements.
func textArray(v []string) string {
	var sb strings.Builder
	sb.WriteByte('{')
	for i, s := range v {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteByte('"')
		for _, r := range s {
			if r == '"' || r == '\\' {
				sb.WriteByte('\\')
			}
			sb.WriteRune(r)
		}
		sb.WriteByte('"')
	}
	sb.WriteByte('}')
	return sb.String()
}

// intArray is v as a PostgreSQL array literal.
func intArray(v []int64) string {
	var sb strings.Builder
	sb.WriteByte('{')
	for i, n := range v {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.FormatInt(n, 10))
	}
	sb.WriteByte('}')
	return sb.String()
}
