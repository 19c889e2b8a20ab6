package pgoutbox_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// keysOf returns count distinct keys whose entries go to partition p of n.
func keysOf(t *testing.T, p, n, count int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < count; i++ {
		if i == 100000 {
			t.Fatalf("fewer than %d keys for partition %d of %d", count, p, n)
		}
		if k := fmt.Sprintf("key-%d", i); outbox.PartitionOf(k, n) == p {
			out = append(out, k)
		}
	}
	return out
}

// keyOf returns a key whose entries go to partition p of n.
func keyOf(t *testing.T, p, n int) string {
	t.Helper()
	return keysOf(t, p, n, 1)[0]
}

// appendEntries appends es in one transaction.
func appendEntries(t *testing.T, b *pgoutbox.Backend, p *pgxpool.Pool, es ...outbox.Entry) {
	t.Helper()
	ctx := t.Context()
	if err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, es...) }); err != nil {
		t.Fatalf("AppendInTx: %v", err)
	}
}

// dbNow reads the database's clock.
func dbNow(t *testing.T, p *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	if err := p.QueryRow(t.Context(), "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

func TestPartitionStats(t *testing.T) {
	t.Parallel()
	const n = 4
	b, p := newBackend(t, extended, pgoutbox.Options{Partitions: n})
	ctx := t.Context()
	lease := pgx.Identifier{b.Options().Schema, "outbox_lease"}.Sanitize()
	k0, k2 := keysOf(t, 0, n, 3), keyOf(t, 2, n)
	later := time.Now().Add(time.Hour)

	// Partition 0: two due entries claimed by a live lease and not
	// finished, one scheduled, one parked. Partition 1: a released lease.
	// Partition 2: one due entry and a lease that has expired. Partition
	// 3: nothing at all.
	appendEntries(t, b, p,
		outbox.Entry{ID: "due-1", Topic: "t", Key: k0[0]},
		outbox.Entry{ID: "due-2", Topic: "t", Key: k0[1]},
		outbox.Entry{ID: "later", Topic: "t", Key: k0[0], NotBefore: later},
		outbox.Entry{ID: "two", Topic: "t", Key: k2},
	)
	l0, err := b.AcquireLease(ctx, 0, "relay-a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := b.FindPendingBatch(ctx, l0, 10)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("FindPendingBatch: %d entries (%v), want the 2 due ones", len(claimed), err)
	}
	appendEntries(t, b, p, outbox.Entry{ID: "dead", Topic: "t", Key: k0[2]})
	if err := b.MarkFailed(ctx, l0, []outbox.Failure{{ID: "dead", Error: "boom", Park: true}}); err != nil {
		t.Fatal(err)
	}
	l1, err := b.AcquireLease(ctx, 1, "relay-b", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ReleaseLease(ctx, l1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireLease(ctx, 2, "relay-c", time.Minute); err != nil {
		t.Fatal(err)
	}
	// Expire partition 2's lease on the database's clock, without waiting.
	if _, err := p.Exec(ctx, "UPDATE "+lease+" SET expires_at = now() - interval '1 second' WHERE partition = 2"); err != nil {
		t.Fatal(err)
	}

	before := dbNow(t, p)
	got, err := b.PartitionStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total, err := b.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("PartitionStats returned %d partitions, want %d: %+v", len(got), n, got)
	}
	want := make([]outbox.PartitionStats, n)
	for i := range want {
		want[i].Partition = i
	}
	want[0].Pending, want[0].Due, want[0].Parked = 3, 2, 1
	want[2].Pending, want[2].Due = 1, 1
	var sum outbox.Stats
	for i, s := range got {
		if s.Partition != i || s.Pending != want[i].Pending || s.Due != want[i].Due || s.Parked != want[i].Parked {
			t.Errorf("partition %d: %+v, want partition %d with pending %d, due %d, parked %d",
				i, s, i, want[i].Pending, want[i].Due, want[i].Parked)
		}
		if (s.Due > 0) != !s.OldestDue.IsZero() || s.OldestDue.After(before) {
			t.Errorf("partition %d: OldestDue %v with %d due (read at %v)", i, s.OldestDue, s.Due, before)
		}
		sum.Pending += s.Pending
		sum.Due += s.Due
		sum.Parked += s.Parked
		if !s.OldestDue.IsZero() && (sum.OldestDue.IsZero() || s.OldestDue.Before(sum.OldestDue)) {
			sum.OldestDue = s.OldestDue
		}
	}
	if sum != total {
		t.Errorf("the partitions add up to %+v, Stats reports %+v", sum, total)
	}
	if got[0].Lease != l0 {
		t.Errorf("partition 0 lease %+v, want the live lease %+v", got[0].Lease, l0)
	}
	for _, i := range []int{1, 2, 3} {
		if got[i].Lease != (outbox.Lease{}) {
			t.Errorf("partition %d lease %+v, want none (released, expired, never taken)", i, got[i].Lease)
		}
	}
}

func TestPartitionStatsOfEmptyOutbox(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, pgx.QueryExecModeSimpleProtocol, pgoutbox.Options{Partitions: 3})
	got, err := b.PartitionStats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("%d partitions, want 3", len(got))
	}
	for i, s := range got {
		if s != (outbox.PartitionStats{Partition: i}) {
			t.Errorf("partition %d: %+v, want nothing", i, s)
		}
	}
}

func TestLookup(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{extended, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			const n = 2
			b, p := newBackend(t, mode, pgoutbox.Options{Partitions: n})
			ctx := t.Context()
			k := keyOf(t, 1, n)
			at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
			longErr := strings.Repeat("é", 1500) // 3000 bytes: kept in full
			appendEntries(t, b, p,
				outbox.Entry{ID: "fails", Topic: "t", Key: k, Payload: []byte("p1"), Headers: map[string]string{"a": "1", "b": "\x00"}},
				outbox.Entry{ID: "held", Topic: "t", Key: k, Payload: []byte("p2")},
				outbox.Entry{ID: "parks", Topic: "t", Key: k + "-parks"},
				outbox.Entry{ID: "scheduled", Topic: "t", Key: k, NotBefore: at},
			)
			parksPart := outbox.PartitionOf(k+"-parks", n)

			info, err := b.Lookup(ctx, "scheduled")
			if err != nil {
				t.Fatal(err)
			}
			if info.Parked || !info.DueAt.Equal(at) || !info.NotBefore.Equal(at) || info.Partition != 1 || info.Key != k {
				t.Errorf("scheduled: %+v, want pending in partition 1, due at its NotBefore %v", info, at)
			}

			lease, err := b.AcquireLease(ctx, 1, "relay", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.FindPendingBatch(ctx, lease, 10); err != nil {
				t.Fatal(err)
			}
			before := dbNow(t, p)
			if err := b.MarkFailed(ctx, lease, []outbox.Failure{{ID: "fails", Error: "timeout", Delay: time.Hour}}); err != nil {
				t.Fatal(err)
			}
			after := dbNow(t, p)
			if err := b.Release(ctx, lease, []string{"held"}); err != nil {
				t.Fatal(err)
			}

			info, err = b.Lookup(ctx, "fails")
			if err != nil {
				t.Fatal(err)
			}
			if info.Parked || info.Attempts != 1 || info.LastError != "timeout" || info.Partition != 1 ||
				string(info.Payload) != "p1" || info.Headers["a"] != "1" || info.Headers["b"] != "\x00" || len(info.Headers) != 2 || info.CreatedAt.IsZero() {
				t.Errorf("retrying entry: %+v", info)
			}
			if info.DueAt.Before(before.Add(time.Hour)) || info.DueAt.After(after.Add(time.Hour)) {
				t.Errorf("retrying entry due at %v, want its retry time, an hour after MarkFailed ran (between %v and %v)",
					info.DueAt, before.Add(time.Hour), after.Add(time.Hour))
			}

			// A held-back entry (never attempted) is due at its append time.
			info, err = b.Lookup(ctx, "held")
			if err != nil {
				t.Fatal(err)
			}
			if info.Parked || info.Attempts != 0 || !info.DueAt.Equal(info.CreatedAt) || info.Headers != nil {
				t.Errorf("held-back entry: %+v, want pending, due at its append time %v, no headers", info, info.CreatedAt)
			}

			pl, err := b.AcquireLease(ctx, parksPart, "relay", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := b.MarkFailed(ctx, pl, []outbox.Failure{{ID: "parks", Error: longErr, Park: true}}); err != nil {
				t.Fatal(err)
			}
			info, err = b.Lookup(ctx, "parks")
			if err != nil {
				t.Fatal(err)
			}
			if !info.Parked || !info.DueAt.IsZero() || info.Attempts != 1 || info.LastError != longErr || info.Partition != parksPart {
				t.Errorf("parked entry: parked %v, due %v, attempts %d, partition %d, last error of %d bytes; want parked, no due time, 1 attempt, partition %d, the %d-byte error",
					info.Parked, info.DueAt, info.Attempts, info.Partition, len(info.LastError), parksPart, len(longErr))
			}

			if err := b.MarkSent(ctx, lease, []string{"held"}); err != nil {
				t.Fatal(err)
			}
			if err := b.Cancel(ctx, "scheduled"); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"held", "scheduled", "never", "", "nul\x00", "bad\xff"} {
				if _, err := b.Lookup(ctx, id); !errors.Is(err, outbox.ErrNotFound) {
					t.Errorf("Lookup(%q) = %v, want ErrNotFound (sent, cancelled or never appended)", id, err)
				}
			}
		})
	}
}

func TestLookupOfCorruptEntry(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	appendEntries(t, b, p, outbox.Entry{ID: "bad", Topic: "t", Headers: map[string]string{"a": "b"}})
	table := pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()
	if _, err := p.Exec(ctx, "UPDATE "+table+` SET headers = '\x05ab'::bytea WHERE id = 'bad'`); err != nil {
		t.Fatal(err)
	}
	info, err := b.Lookup(ctx, "bad")
	if err != nil || info.ID != "bad" || info.Topic != "t" || info.Headers != nil || !strings.HasPrefix(info.LastError, "pgoutbox: corrupt headers column: ") {
		t.Fatalf("Lookup of an entry with corrupt headers: %+v, %v; want the entry with nil headers and a last error naming the column", info, err)
	}
}

// IDs PostgreSQL text cannot hold were never appended: not found, not a
// database error.
func TestCancelOfUnstorableIDIsNotFound(t *testing.T) {
	t.Parallel()
	b, _ := newBackend(t, extended, pgoutbox.Options{})
	for _, id := range []string{"nul\x00", "bad\xff"} {
		if err := b.Cancel(t.Context(), id); !errors.Is(err, outbox.ErrNotFound) {
			t.Errorf("Cancel(%q) = %v, want ErrNotFound", id, err)
		}
	}
}

func TestInspectAfterClose(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	appendEntries(t, b, p, outbox.Entry{ID: "x", Topic: "t"})
	_ = b.Close()
	if _, err := b.PartitionStats(t.Context()); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("PartitionStats after Close: %v, want ErrClosed", err)
	}
	if _, err := b.Lookup(t.Context(), "x"); !errors.Is(err, outbox.ErrClosed) {
		t.Errorf("Lookup after Close: %v, want ErrClosed", err)
	}
}
