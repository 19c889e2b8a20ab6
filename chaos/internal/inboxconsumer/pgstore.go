package inboxconsumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox/inbox"
)

// pgStore is the consumer's inbox store in PostgreSQL: the tables of
// part B's pginbox (<table>, <table>_keyseq, <table>_offsets) written with
// the same statements' shape. It stands in for pginbox until that package
// lands on this branch; inboxtest runs against it (pgstore_test.go).
type pgStore struct {
	pool                 *pgxpool.Pool
	ids, keyseq, offsets string // quoted, schema-qualified table names
}

var _ inbox.Store[pgx.Tx] = (*pgStore)(nil)

func newPGStore(pool *pgxpool.Pool, schema string) *pgStore {
	q := func(t string) string { return pgx.Identifier{schema, t}.Sanitize() }
	return &pgStore{pool: pool, ids: q("inbox"), keyseq: q("inbox_keyseq"), offsets: q("inbox_offsets")}
}

// inboxSchema creates the store's tables in schema (which must exist).
func inboxSchema(schema string) string {
	q := func(t string) string { return pgx.Identifier{schema, t}.Sanitize() }
	return fmt.Sprintf(`
CREATE TABLE IF NOT EXISTS %s (id text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS %s (key text PRIMARY KEY, seq bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS %s (grp text NOT NULL, topic text NOT NULL, part integer NOT NULL, next bigint NOT NULL, PRIMARY KEY (grp, topic, part));
`, q("inbox"), q("inbox_keyseq"), q("inbox_offsets"))
}

func (s *pgStore) InTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) (err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			panic(p)
		}
	}()
	if err := fn(ctx, tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	return tx.Commit(ctx)
}

func (s *pgStore) Retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40001" || pe.Code == "40P01" || pe.Code == "55P03"
	}
	return false
}

func (s *pgStore) Record(ctx context.Context, tx pgx.Tx, ids []string) ([]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if slices.Contains(ids, "") {
		return nil, fmt.Errorf("inboxconsumer: Record of an empty ID: %w", inbox.ErrInvalidMessage)
	}
	// Sorted, so that two transactions lock the IDs they share in one
	// order (no deadlock between them).
	uniq := slices.Clone(ids)
	slices.Sort(uniq)
	uniq = slices.Compact(uniq)
	rows, err := tx.Query(ctx, "INSERT INTO "+s.ids+" (id) SELECT unnest($1::text[]) ON CONFLICT (id) DO NOTHING RETURNING id", uniq)
	if err != nil {
		return nil, err
	}
	fresh := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		fresh[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([]bool, len(ids))
	for i, id := range ids {
		out[i] = fresh[id]
		fresh[id] = false // an ID earlier in ids took it
	}
	return out, nil
}

func (s *pgStore) KeySeqs(ctx context.Context, tx pgx.Tx, keys []string) (map[string]int64, error) {
	out := map[string]int64{}
	if len(keys) == 0 {
		return out, nil
	}
	sorted := slices.Sorted(slices.Values(keys))
	rows, err := tx.Query(ctx, "SELECT key, seq FROM "+s.keyseq+" WHERE key = ANY($1::text[]) ORDER BY key FOR UPDATE", sorted)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			rows.Close()
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}

func (s *pgStore) SetKeySeqs(ctx context.Context, tx pgx.Tx, seqs map[string]int64) error {
	if len(seqs) == 0 {
		return nil
	}
	keys := make([]string, 0, len(seqs))
	for k := range seqs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	vals := make([]int64, len(keys))
	for i, k := range keys {
		vals[i] = seqs[k]
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+s.keyseq+" (key, seq) SELECT * FROM unnest($1::text[], $2::bigint[]) ON CONFLICT (key) DO UPDATE SET seq = EXCLUDED.seq, updated_at = now()", keys, vals)
	return err
}

func (s *pgStore) SaveOffsets(ctx context.Context, tx pgx.Tx, offsets []inbox.Offset) error {
	if len(offsets) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, o := range offsets {
		b.Queue("INSERT INTO "+s.offsets+" (grp, topic, part, next) VALUES ($1, $2, $3, $4) ON CONFLICT (grp, topic, part) DO UPDATE SET next = EXCLUDED.next",
			o.Group, o.Topic, o.Partition, o.Next)
	}
	return tx.SendBatch(ctx, b).Close()
}

func (s *pgStore) Offsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	rows, err := s.pool.Query(ctx, "SELECT part, next FROM "+s.offsets+" WHERE grp = $1 AND topic = $2", group, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for rows.Next() {
		var p int32
		var n int64
		if err := rows.Scan(&p, &n); err != nil {
			rows.Close()
			return nil, err
		}
		out[p] = n
	}
	return out, rows.Err()
}

func (s *pgStore) Purge(ctx context.Context, before time.Time, limit int) (ids, keys int, err error) {
	if limit < 1 {
		return 0, 0, fmt.Errorf("inboxconsumer: Purge limit %d: give 1 or more: %w", limit, inbox.ErrInvalidArgument)
	}
	err = s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		t, err := tx.Exec(ctx, "DELETE FROM "+s.ids+" WHERE id IN (SELECT id FROM "+s.ids+" WHERE applied_at < $1 ORDER BY applied_at LIMIT $2 FOR UPDATE SKIP LOCKED)", before, limit)
		if err != nil {
			return err
		}
		ids = int(t.RowsAffected())
		t, err = tx.Exec(ctx, "DELETE FROM "+s.keyseq+" WHERE key IN (SELECT key FROM "+s.keyseq+" WHERE updated_at < $1 ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED)", before, limit)
		if err != nil {
			return err
		}
		keys = int(t.RowsAffected())
		return nil
	})
	return ids, keys, err
}
