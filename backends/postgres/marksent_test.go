package pgoutbox_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// MarkSent finds the rows the Backend's last fetch returned by their
// ctids (mark_sent_tid.sql). These tests change rows of a fetched batch
// before the MarkSent in every way that moves or removes them, and check
// that what MarkSent must remove is removed all the same, with and
// without the archive.
func TestMarkSentOfFetchedRows(t *testing.T) {
	t.Parallel()
	for _, archive := range []bool{false, true} {
		name := "Delete"
		if archive {
			name = "Archive"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			b, p := newBackend(t, extended, pgoutbox.Options{Archive: archive})
			table := pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()
			require := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			appendEntries(t, b, p,
				outbox.Entry{ID: "a", Topic: "t", Key: "k"},
				outbox.Entry{ID: "b", Topic: "t", Key: "k2"},
				outbox.Entry{ID: "c", Topic: "t"},
				outbox.Entry{ID: "d", Topic: "t"},
				outbox.Entry{ID: "e", Topic: "t"})
			l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
			require(err)
			batch, err := b.FindPendingBatch(ctx, l, 10)
			require(err)
			if len(batch) != 5 {
				t.Fatalf("fetched %d entries, want 5", len(batch))
			}
			// b is updated (its row version moves), c is cancelled, d is
			// updated by hand and moved back: none is where the fetch
			// read it.
			require(b.MarkFailed(ctx, l, []outbox.Failure{{ID: "b", Delay: -time.Second, Error: "retry"}}))
			require(b.Cancel(ctx, "c"))
			_, err = p.Exec(ctx, "UPDATE "+table+" SET last_error = 'touched' WHERE id = 'd'")
			require(err)
			require(b.MarkSent(ctx, l, []string{"a", "b", "c", "d", "e"}))
			var left int
			require(p.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&left))
			if left != 0 {
				t.Fatalf("%d rows left after MarkSent of every entry, want 0", left)
			}
			if archive {
				var archived []string
				rows, err := p.Query(ctx, "SELECT id FROM "+pgx.Identifier{b.Options().Schema, "outbox_archive"}.Sanitize()+" ORDER BY id")
				require(err)
				archived, err = pgx.CollectRows(rows, pgx.RowTo[string])
				require(err)
				if want := []string{"a", "b", "d", "e"}; !slices.Equal(archived, want) {
					t.Fatalf("archived %v, want %v", archived, want)
				}
			}
			// A stale lease changes nothing, known rows or not.
			appendEntries(t, b, p, outbox.Entry{ID: "f", Topic: "t"})
			batch, err = b.FindPendingBatch(ctx, l, 10)
			require(err)
			require(b.ReleaseLease(ctx, l))
			l2, err := b.AcquireLease(ctx, 0, "other", time.Minute)
			require(err)
			if err := b.MarkSent(ctx, l, []string{"f"}); !errors.Is(err, outbox.ErrLeaseLost) {
				t.Fatalf("MarkSent under a lost lease: %v, want ErrLeaseLost", err)
			}
			require(b.MarkSent(context.Background(), l2, []string{"f"}))
			require(p.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&left))
			if left != 0 {
				t.Fatalf("%d rows left, want 0", left)
			}
		})
	}
}
