package pgoutbox_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Partitions: 4})
	ctx := t.Context()
	member := pgx.Identifier{b.Options().Schema, "outbox_member"}.Sanitize()
	now := func() time.Time {
		t.Helper()
		var n time.Time
		if err := p.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	owners := func(ms []outbox.Member) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.Owner)
		}
		return out
	}

	before := now()
	got, err := b.Heartbeat(ctx, outbox.Member{Owner: "b", Partitions: []int{1, 2}, MaxPartitions: 2, Expires: time.Now().Add(-time.Hour)}, time.Minute)
	after := now()
	if err != nil || len(got) != 1 {
		t.Fatalf("first Heartbeat: %+v, %v; want the caller's record", got, err)
	}
	if m := got[0]; m.Owner != "b" || !slices.Equal(m.Partitions, []int{1, 2}) || m.MaxPartitions != 2 ||
		m.Expires.Before(before.Add(time.Minute)) || m.Expires.After(after.Add(time.Minute)) {
		t.Fatalf("first Heartbeat returned %+v; want b, [1 2], 2, expiring a minute after the database's now (%v..%v)", m, before, after)
	}

	// Sorted by owner in byte order, as Go compares strings.
	for _, o := range []string{"a", "B", "é"} {
		if _, err := b.Heartbeat(ctx, outbox.Member{Owner: o}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	got, err = b.Heartbeat(ctx, outbox.Member{Owner: "b", Partitions: []int{3}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"B", "a", "b", "é"}; !slices.Equal(owners(got), want) {
		t.Fatalf("members %v, want %v", owners(got), want)
	}
	if m := got[2]; !slices.Equal(m.Partitions, []int{3}) || m.MaxPartitions != 0 {
		t.Fatalf("b's record %+v; want it replaced by [3], no cap", m)
	}
	if got[0].Partitions != nil {
		t.Fatalf("a record without partitions came back with %v, want nil", got[0].Partitions)
	}

	// Expired records are neither returned nor kept.
	if _, err := p.Exec(ctx, "UPDATE "+member+" SET expires_at = now() - interval '1 second' WHERE owner IN ('B', 'é')"); err != nil {
		t.Fatal(err)
	}
	got, err = b.Heartbeat(ctx, outbox.Member{Owner: "a"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b"}; !slices.Equal(owners(got), want) {
		t.Fatalf("members after two expired %v, want %v", owners(got), want)
	}
	var rows int
	if err := p.QueryRow(ctx, "SELECT count(*) FROM "+member).Scan(&rows); err != nil || rows != 2 {
		t.Fatalf("%d member rows (%v) after the expired were deleted, want 2", rows, err)
	}

	// Leave.
	for _, o := range []string{"b", "b", "never", ""} {
		if err := b.Leave(ctx, o); err != nil {
			t.Fatalf("Leave(%q): %v, want nil", o, err)
		}
	}
	got, err = b.Heartbeat(ctx, outbox.Member{Owner: "a"}, time.Minute)
	if err != nil || !slices.Equal(owners(got), []string{"a"}) {
		t.Fatalf("members after b left: %v, %v; want [a]", owners(got), err)
	}

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Heartbeat(ctx, outbox.Member{Owner: "a"}, time.Minute); !errors.Is(err, outbox.ErrClosed) {
		t.Fatalf("Heartbeat after Close: %v, want ErrClosed", err)
	}
	if err := b.Leave(ctx, "a"); !errors.Is(err, outbox.ErrClosed) {
		t.Fatalf("Leave after Close: %v, want ErrClosed", err)
	}
}

// TestHeartbeatsOfExpiredMembersDoNotDeadlock lets every record expire and
// then has all relays heartbeat at once, so each deletes the others'
// records while renewing its own, many rounds: no heartbeat may fail (a
// deadlock would fail one with SQLSTATE 40P01) and each sees itself.
func TestHeartbeatsOfExpiredMembersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Partitions: 8})
	ctx := t.Context()
	member := pgx.Identifier{b.Options().Schema, "outbox_member"}.Sanitize()
	const relays = 8
	for round := range 30 {
		if _, err := p.Exec(ctx, "UPDATE "+member+" SET expires_at = now() - interval '1 second'"); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for r := range relays {
			wg.Go(func() {
				owner := fmt.Sprint("relay-", r)
				got, err := b.Heartbeat(ctx, outbox.Member{Owner: owner, Partitions: []int{r}}, time.Minute)
				if err != nil {
					t.Errorf("round %d: %s: %v", round, owner, err)
					return
				}
				if !slices.ContainsFunc(got, func(m outbox.Member) bool { return m.Owner == owner }) {
					t.Errorf("round %d: %s is not among the members %+v", round, owner, got)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}
