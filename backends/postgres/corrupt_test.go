package pgoutbox_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// TestCorruptHeadersAreParked corrupts one row's headers column by hand
// (as issue 18 did) and checks that the row is parked with a reason naming
// the column while the rest of its partition keeps flowing: FindPendingBatch
// returns the healthy entries in order, the next fetch the rest of the
// corrupt entry's key, and Parked, Lookup and Requeue handle it without
// failing.
func TestCorruptHeadersAreParked(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{extended, pgx.QueryExecModeSimpleProtocol} {
		b, p := newBackend(t, mode, pgoutbox.Options{})
		ctx := t.Context()
		table := pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()
		h := map[string]string{"h": "v"}
		// Key k: a0 (to be corrupted), a1, a2, a3; key j: b0, b1; c0 unkeyed.
		appendEntries(t, b, p,
			outbox.Entry{ID: "a0", Topic: "t", Key: "k", Payload: []byte("a0"), Headers: h},
			outbox.Entry{ID: "b0", Topic: "t", Key: "j", Payload: []byte("b0"), Headers: h},
			outbox.Entry{ID: "a1", Topic: "t", Key: "k", Payload: []byte("a1"), Headers: h},
			outbox.Entry{ID: "a2", Topic: "t", Key: "k", Payload: []byte("a2")},
			outbox.Entry{ID: "c0", Topic: "t", Payload: []byte("c0"), Headers: h},
			outbox.Entry{ID: "b1", Topic: "t", Key: "j", Payload: []byte("b1"), Headers: h},
			outbox.Entry{ID: "a3", Topic: "t", Key: "k", Payload: []byte("a3"), Headers: h},
		)
		if _, err := p.Exec(ctx, "UPDATE "+table+` SET headers = '\xdeadbeef00ff'::bytea WHERE id = 'a0'`); err != nil {
			t.Fatal(err)
		}
		l, err := b.AcquireLease(ctx, 0, "o", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ids := func(es []outbox.Entry) []string {
			var out []string
			for _, e := range es {
				out = append(out, e.ID)
			}
			return out
		}
		batch, err := b.FindPendingBatch(ctx, l, 4)
		if err != nil {
			t.Fatalf("mode %v: FindPendingBatch with a corrupt row: %v; want the rest of the batch", mode, err)
		}
		if got, want := ids(batch), []string{"b0", "a1", "a2"}; !slices.Equal(got, want) {
			t.Fatalf("mode %v: first batch %v, want %v (a0 parked)", mode, got, want)
		}
		if batch[1].Headers["h"] != "v" || batch[2].Headers != nil {
			t.Fatalf("mode %v: healthy entries' headers %v, %v", mode, batch[1].Headers, batch[2].Headers)
		}
		var state, lastErr string
		var attempts int
		if err := p.QueryRow(ctx, "SELECT state, attempts, last_error FROM "+table+" WHERE id = 'a0'").Scan(&state, &attempts, &lastErr); err != nil {
			t.Fatal(err)
		}
		wantReason := "pgoutbox: corrupt headers column: a length runs past the end; was it written by something other than pgoutbox?; " +
			"the stored bytes cannot be decoded, so the entry cannot be published: inspect it (outbox show ID), fix or cancel it"
		if state != "parked" || attempts != 1 || lastErr != wantReason {
			t.Fatalf("mode %v: the corrupt row is %s, attempts %d, last error %q; want parked, 1, %q", mode, state, attempts, lastErr, wantReason)
		}
		if err := b.MarkSent(ctx, l, ids(batch)); err != nil {
			t.Fatal(err)
		}
		batch, err = b.FindPendingBatch(ctx, l, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ids(batch), []string{"c0", "b1", "a3"}; !slices.Equal(got, want) {
			t.Fatalf("mode %v: second batch %v, want %v", mode, got, want)
		}
		if err := b.MarkSent(ctx, l, ids(batch)); err != nil {
			t.Fatal(err)
		}

		parked, err := b.Parked(ctx, "", 10)
		if err != nil {
			t.Fatalf("mode %v: Parked with a corrupt row: %v", mode, err)
		}
		if len(parked) != 1 || parked[0].ID != "a0" || parked[0].Topic != "t" || parked[0].Key != "k" ||
			parked[0].Headers != nil || parked[0].Attempts != 1 || parked[0].LastError != wantReason {
			t.Fatalf("mode %v: Parked = %+v; want a0 with topic, key, nil headers, attempts 1 and the reason", mode, parked)
		}
		info, err := b.Lookup(ctx, "a0")
		if err != nil {
			t.Fatalf("mode %v: Lookup of the corrupt row: %v", mode, err)
		}
		if !info.Parked || info.Key != "k" || info.Headers != nil || info.LastError != wantReason {
			t.Fatalf("mode %v: Lookup = %+v", mode, info)
		}

		// Requeued, it is parked again by the next fetch, with the reason,
		// and does not hold back the entries of its key appended since.
		if n, err := b.Requeue(ctx, "a0"); err != nil || n != 1 {
			t.Fatalf("mode %v: Requeue = %d, %v", mode, n, err)
		}
		appendEntries(t, b, p, outbox.Entry{ID: "a4", Topic: "t", Key: "k", Payload: []byte("a4")})
		batch, err = b.FindPendingBatch(ctx, l, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ids(batch), []string{"a4"}; !slices.Equal(got, want) {
			t.Fatalf("mode %v: after Requeue: %v, want %v", mode, got, want)
		}
		if parked, err := b.Parked(ctx, "", 10); err != nil || len(parked) != 1 || parked[0].LastError != wantReason || parked[0].Attempts != 1 {
			t.Fatalf("mode %v: after Requeue and a fetch, Parked = %+v, %v; want a0 parked again with the reason", mode, parked, err)
		}
	}
}

// TestCorruptHeadersOfFailingEntryReleaseItsKey corrupts an entry that is
// failing (attempted, due again), so the entries of its key are held back
// behind it: parking it releases them, and a batch of only corrupt rows is
// not reported as an empty partition.
func TestCorruptHeadersOfFailingEntryReleaseItsKey(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	table := pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()
	appendN(t, b, p, "e", 4, func(int) string { return "k" })
	l, err := b.AcquireLease(ctx, 0, "o", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: "e000000", Error: "boom", Delay: -time.Hour}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, "UPDATE "+table+` SET headers = '\x05ab'::bytea WHERE id = 'e000000'`); err != nil {
		t.Fatal(err)
	}
	// Limit 1: the first read finds only the corrupt row; the fetch parks it
	// and reads again.
	batch, err := b.FindPendingBatch(ctx, l, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(batch) != 1 || batch[0].ID != "e000001" {
		t.Fatalf("batch %+v, want e000001", batch)
	}
	batch, err = b.FindPendingBatch(ctx, l, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range batch {
		got = append(got, e.ID)
	}
	if want := []string{"e000001", "e000002", "e000003"}; !slices.Equal(got, want) {
		t.Fatalf("batch %v, want %v", got, want)
	}
	var state string
	var attempts int
	if err := p.QueryRow(ctx, "SELECT state, attempts FROM "+table+" WHERE id = 'e000000'").Scan(&state, &attempts); err != nil {
		t.Fatal(err)
	}
	if state != "parked" || attempts != 2 {
		t.Fatalf("corrupt failing entry: %s, attempts %d; want parked, 2", state, attempts)
	}

	// A stale lease parks nothing and fails as a lost lease.
	if _, err := p.Exec(ctx, "UPDATE "+table+` SET headers = '\x05ab'::bytea WHERE id = 'e000001'`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireLease(ctx, 0, "o", time.Hour); err != nil {
		t.Fatal(err)
	}
	stale := l
	stale.Version--
	if _, err := b.FindPendingBatch(ctx, stale, 10); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("FindPendingBatch with a stale lease: %v, want ErrLeaseLost", err)
	}
	if err := p.QueryRow(ctx, "SELECT state FROM "+table+" WHERE id = 'e000001'").Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != "pending" {
		t.Fatalf("a stale lease changed the corrupt row to %s", state)
	}
}
