package mysqlinbox_test

import (
	"database/sql"
	"testing"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/inbox/inboxtest"
)

// TestConformance runs the inbox store suite, each case with an inbox in
// a database of its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	inboxtest.Run(t, inboxtest.Harness[*sql.Tx]{
		New: func(t *testing.T) inbox.Store[*sql.Tx] {
			s, _ := newStore(t, mysqlinbox.Options{})
			return s
		},
	})
}
