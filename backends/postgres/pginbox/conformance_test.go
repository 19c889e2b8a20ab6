package pginbox_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/inbox/inboxtest"
)

// TestConformance runs the inbox store suite against both stores (the
// pgx one also with the simple protocol, as behind PgBouncer), each case
// on a schema of its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	var opts sync.Map // store -> pginbox.Options, for backdate
	remember := func(s any, o pginbox.Options) { opts.Store(s, o) }
	backdate := func(t *testing.T, s any, d time.Duration, ids, keys []string) {
		o, ok := opts.Load(s)
		if !ok {
			t.Fatalf("Backdate of a store the harness did not make")
		}
		backdateRecords(t, o.(pginbox.Options), d, ids, keys)
	}
	t.Run("pgx", func(t *testing.T) {
		t.Parallel()
		inboxtest.Run(t, inboxtest.Harness[pgx.Tx]{
			New: func(t *testing.T) inbox.Store[pgx.Tx] { s, o := newStore(t); remember(s, o); return s },
			Backdate: func(t *testing.T, s inbox.Store[pgx.Tx], d time.Duration, ids, keys []string) {
				backdate(t, s, d, ids, keys)
			},
		})
	})
	t.Run("pgx_simple_protocol", func(t *testing.T) {
		t.Parallel()
		inboxtest.Run(t, inboxtest.Harness[pgx.Tx]{
			New: func(t *testing.T) inbox.Store[pgx.Tx] {
				_, o := newStore(t)
				s, err := pginbox.New(simplePool(t), o)
				if err != nil {
					t.Fatal(err)
				}
				remember(s, o)
				return s
			},
			Backdate: func(t *testing.T, s inbox.Store[pgx.Tx], d time.Duration, ids, keys []string) {
				backdate(t, s, d, ids, keys)
			},
		})
	})
	t.Run("database_sql", func(t *testing.T) {
		t.Parallel()
		inboxtest.Run(t, inboxtest.Harness[*sql.Tx]{
			New: func(t *testing.T) inbox.Store[*sql.Tx] { s, o := newSQLStore(t); remember(s, o); return s },
			Backdate: func(t *testing.T, s inbox.Store[*sql.Tx], d time.Duration, ids, keys []string) {
				backdate(t, s, d, ids, keys)
			},
		})
	})
}

// backdateRecords moves the records of ids and keys in the inbox of o back
// by d (the suite's Harness.Backdate).
func backdateRecords(t *testing.T, o pginbox.Options, d time.Duration, ids, keys []string) {
	t.Helper()
	ctx := context.Background()
	secs := d.Seconds()
	if o.Table == "" {
		o.Table = pginbox.DefaultTable
	}
	if o.Schema == "" {
		o.Schema = pginbox.DefaultSchema
	}
	table := pgx.Identifier{o.Schema, o.Table}.Sanitize()
	keyseq := pgx.Identifier{o.Schema, o.Table + "_keyseq"}.Sanitize()
	if _, err := pool(t).Exec(ctx, "UPDATE "+table+" SET applied_at = applied_at - make_interval(secs => $1) WHERE id = ANY($2)", secs, ids); err != nil {
		t.Fatalf("backdate IDs: %v", err)
	}
	if _, err := pool(t).Exec(ctx, "UPDATE "+keyseq+" SET updated_at = updated_at - make_interval(secs => $1) WHERE key = ANY($2)", secs, keys); err != nil {
		t.Fatalf("backdate keys: %v", err)
	}
}

var (
	_ inbox.KeyRecorder[pgx.Tx]  = (*pginbox.Store)(nil)
	_ inbox.Finisher[pgx.Tx]     = (*pginbox.Store)(nil)
	_ inbox.KeyRecorder[*sql.Tx] = (*pginbox.SQLStore)(nil)
	_ inbox.Finisher[*sql.Tx]    = (*pginbox.SQLStore)(nil)
)
