package pginbox_test

import (
	"database/sql"
	"testing"

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
	t.Run("pgx", func(t *testing.T) {
		t.Parallel()
		inboxtest.Run(t, inboxtest.Harness[pgx.Tx]{
			New: func(t *testing.T) inbox.Store[pgx.Tx] { s, _ := newStore(t); return s },
		})
	})
	t.Run("pgx_simple_protocol", func(t *testing.T) {
		t.Parallel()
		inboxtest.Run(t, inboxtest.Harness[pgx.Tx]{
			New: func(t *testing.T) inbox.Store[pgx.Tx] {
				_, opts := newStore(t)
				s, err := pginbox.New(simplePool(t), opts)
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
		})
	})
	t.Run("database_sql", func(t *testing.T) {
		t.Parallel()
		inboxtest.Run(t, inboxtest.Harness[*sql.Tx]{
			New: func(t *testing.T) inbox.Store[*sql.Tx] { s, _ := newSQLStore(t); return s },
		})
	})
}
