package pgoutbox_test

import (
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// TestMarkFailedDelayByDatabaseClock checks that MarkFailed stores the due
// time as the database's now() plus Delay: a negative Delay orders the
// entry before entries due since, zero makes it due at once (after the
// entries already due), a positive one keeps it back.
func TestMarkFailedDelayByDatabaseClock(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{extended, pgx.QueryExecModeSimpleProtocol} {
		b, p := newBackend(t, mode, pgoutbox.Options{})
		ctx := t.Context()
		table := pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()
		appendN(t, b, p, "e", 2, func(int) string { return "" }) // e000000, e000001: one call, one due time
		l, err := b.AcquireLease(ctx, 0, "o", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		clock := func() time.Time {
			t.Helper()
			var now time.Time
			if err := p.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
				t.Fatal(err)
			}
			return now
		}
		fail := func(id string, delay time.Duration) {
			t.Helper()
			before := clock()
			if err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: id, Error: "boom", Delay: delay}}); err != nil {
				t.Fatal(err)
			}
			after := clock()
			var next time.Time
			if err := p.QueryRow(ctx, "SELECT next_at FROM "+table+" WHERE id = $1", id).Scan(&next); err != nil {
				t.Fatal(err)
			}
			if next.Before(before.Add(delay)) || next.After(after.Add(delay)) {
				t.Fatalf("mode %v: %s failed with Delay %v is due at %v; want the database's now plus the delay, in [%v, %v]",
					mode, id, delay, next, before.Add(delay), after.Add(delay))
			}
		}
		fetch := func() []string {
			t.Helper()
			batch, err := b.FindPendingBatch(ctx, l, 10)
			if err != nil {
				t.Fatal(err)
			}
			var ids []string
			for _, e := range batch {
				ids = append(ids, e.ID)
			}
			return ids
		}
		fail("e000000", -time.Hour)
		if got, want := fetch(), []string{"e000000", "e000001"}; !slices.Equal(got, want) {
			t.Fatalf("mode %v: after a negative Delay: %v, want %v", mode, got, want)
		}
		fail("e000000", 0)
		if got, want := fetch(), []string{"e000001", "e000000"}; !slices.Equal(got, want) {
			t.Fatalf("mode %v: after a zero Delay: %v, want %v", mode, got, want)
		}
		fail("e000001", time.Hour)
		if got, want := fetch(), []string{"e000000"}; !slices.Equal(got, want) {
			t.Fatalf("mode %v: after a Delay of an hour: %v, want %v", mode, got, want)
		}
	}
}
