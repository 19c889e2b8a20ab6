package pginbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// statementCounter is a pgx tracer that counts the statements a pool
// sends.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestOneStatementPerMethod: every method sends one statement, whatever
// the number of IDs, keys or offsets (a batch costs what one message
// does), and InTx adds only its BEGIN and COMMIT. A statement is one
// round trip on a connection that has it prepared (pgx's statement
// cache; its first use on a connection adds one to prepare it, and the
// simple protocol never does).
func TestOneStatementPerMethod(t *testing.T) {
	t.Parallel()
	ctx := watchdog(t)
	opts := migrated(t)
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	require.NoError(t, err)
	counter := &statementCounter{}
	cfg.ConnConfig.Tracer = counter
	cfg.MaxConns = 1
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	s, err := pginbox.New(p, opts)
	require.NoError(t, err)

	ids := []string{"a", "b", "c", "a"}
	keys := []string{"k1", "k2", "k3"}
	seqs := map[string]int64{"k1": 1, "k2": 2, "k3": 3}
	offs := []inbox.Offset{{Group: "g", Topic: "t", Partition: 0, Next: 1}, {Group: "g", Topic: "t", Partition: 1, Next: 2}}
	calls := []struct {
		name string
		call func(ctx context.Context, tx pgx.Tx) error
	}{
		{"Record", func(ctx context.Context, tx pgx.Tx) error { _, err := s.Record(ctx, tx, ids); return err }},
		{"KeySeqs", func(ctx context.Context, tx pgx.Tx) error { _, err := s.KeySeqs(ctx, tx, keys); return err }},
		{"SetKeySeqs", func(ctx context.Context, tx pgx.Tx) error { return s.SetKeySeqs(ctx, tx, seqs) }},
		{"SaveOffsets", func(ctx context.Context, tx pgx.Tx) error { return s.SaveOffsets(ctx, tx, offs) }},
		{"RecordWithKeySeqs", func(ctx context.Context, tx pgx.Tx) error {
			_, _, err := s.RecordWithKeySeqs(ctx, tx, ids, keys)
			return err
		}},
		{"Finish", func(ctx context.Context, tx pgx.Tx) error { return s.Finish(ctx, tx, seqs, offs) }},
	}
	for _, c := range calls {
		var in int64
		before := counter.n.Load()
		require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			start := counter.n.Load()
			err := c.call(ctx, tx)
			in = counter.n.Load() - start
			return err
		}), c.name)
		require.Equal(t, int64(1), in, "%s: statements in the transaction", c.name)
		require.Equal(t, int64(3), counter.n.Load()-before, "%s: BEGIN, the statement, COMMIT", c.name)
	}
	for name, call := range map[string]func() error{
		"Offsets": func() error { _, err := s.Offsets(ctx, "g", "t"); return err },
		"Purge":   func() error { _, _, err := s.Purge(ctx, time.Now().Add(time.Hour), 100); return err },
	} {
		before := counter.n.Load()
		require.NoError(t, call(), name)
		require.Equal(t, int64(1), counter.n.Load()-before, "%s: statements", name)
	}
	// Nothing to do is no statement at all.
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		start := counter.n.Load()
		if _, err := s.Record(ctx, tx, nil); err != nil {
			return err
		}
		if _, err := s.KeySeqs(ctx, tx, nil); err != nil {
			return err
		}
		if err := s.SetKeySeqs(ctx, tx, nil); err != nil {
			return err
		}
		if err := s.SaveOffsets(ctx, tx, nil); err != nil {
			return err
		}
		if err := s.Finish(ctx, tx, nil, nil); err != nil {
			return err
		}
		require.Equal(t, start, counter.n.Load(), "empty calls send nothing")
		return nil
	}))
}
