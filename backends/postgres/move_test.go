package pgoutbox_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// Tests of moving a live outbox (move.go, migration 006) on the real
// PostgreSQL: every promise of outbox.Exporter, Importer, Holder and
// Sealer as the Postgres backend keeps it.

func appendOne(t *testing.T, b *pgoutbox.Backend, p *pgxpool.Pool, es ...outbox.Entry) {
	t.Helper()
	ctx := t.Context()
	if err := pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, es...) }); err != nil {
		t.Fatalf("AppendInTx: %v", err)
	}
}

func fetchIDs(t *testing.T, b *pgoutbox.Backend, l outbox.Lease) []string {
	t.Helper()
	es, err := b.FindPendingBatch(t.Context(), l, 100)
	if err != nil {
		t.Fatalf("FindPendingBatch: %v", err)
	}
	return entryIDs(es)
}

func acquire(t *testing.T, b *pgoutbox.Backend, partition int) outbox.Lease {
	t.Helper()
	l, err := b.AcquireLease(t.Context(), partition, "mover", time.Minute)
	if err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	return l
}

func imported(id, key string) outbox.EntryInfo {
	return outbox.EntryInfo{Entry: outbox.Entry{ID: id, Topic: "t", Key: key, Payload: []byte(id)}}
}

func mustImport(t *testing.T, b *pgoutbox.Backend, es ...outbox.EntryInfo) int {
	t.Helper()
	n, err := b.Import(t.Context(), es)
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	return n
}

func TestImportOrder(t *testing.T) {
	t.Parallel()
	// The core guarantee: held since H, an entry A of key k is appended;
	// then an entry I of k is imported, due at a time after A's append
	// (the source's clock ahead, or simply due since): I is lowered to H
	// and fetched before A.
	t.Run("DueImportComesBeforeEarlierAppend", func(t *testing.T) {
		t.Parallel()
		b, p := newBackend(t, extended, pgoutbox.Options{})
		ctx := t.Context()
		if err := b.Hold(ctx, "move test"); err != nil {
			t.Fatal(err)
		}
		hs, err := b.HoldState(ctx)
		if err != nil || !hs.Held {
			t.Fatalf("HoldState = %+v, %v", hs, err)
		}
		appendOne(t, b, p, outbox.Entry{ID: "A", Topic: "t", Key: "k"})
		appendOne(t, b, p, outbox.Entry{ID: "other", Topic: "t", Key: "other"})
		time.Sleep(5 * time.Millisecond)
		i1, i2 := imported("I1", "k"), imported("I2", "k")
		i1.DueAt, i2.DueAt = time.Now(), time.Now().Add(-time.Hour)
		if n := mustImport(t, b, i1, i2); n != 2 {
			t.Fatalf("Import added %d, want 2", n)
		}
		info, err := b.Lookup(ctx, "I1")
		if err != nil {
			t.Fatal(err)
		}
		if !info.DueAt.Equal(hs.Since) {
			t.Errorf("I1 due at %v, want the hold's since %v", info.DueAt, hs.Since)
		}
		if info, _ := b.Lookup(ctx, "I2"); !info.DueAt.Equal(i2.DueAt.Truncate(time.Microsecond)) {
			t.Errorf("I2 due at %v, want its own earlier due time %v", info.DueAt, i2.DueAt)
		}
		l := acquire(t, b, 0)
		if got := fetchIDs(t, b, l); len(got) != 0 {
			t.Fatalf("held outbox fetched %v", got)
		}
		if err := b.Unhold(ctx); err != nil {
			t.Fatal(err)
		}
		got := fetchIDs(t, b, l)
		var ofK []string
		for _, id := range got {
			if id != "other" {
				ofK = append(ofK, id)
			}
		}
		// I2 (due an hour ago) and I1 (lowered to H): in due order, and
		// both before A, which was appended after H.
		if !slices.Equal(ofK, []string{"I2", "I1", "A"}) {
			t.Fatalf("key k fetched as %v, want [I2 I1 A]", ofK)
		}
	})
	t.Run("ImportsKeepImportOrder", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, extended, pgoutbox.Options{})
		ctx := t.Context()
		if err := b.Hold(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		var want []string
		for c := range 3 { // three calls, three entries each, all due at the bound
			var es []outbox.EntryInfo
			for i := range 3 {
				id := fmt.Sprintf("c%d-%d", c, i)
				want = append(want, id)
				es = append(es, imported(id, "k"))
			}
			mustImport(t, b, es...)
		}
		if err := b.Unhold(ctx); err != nil {
			t.Fatal(err)
		}
		if got := fetchIDs(t, b, acquire(t, b, 0)); !slices.Equal(got, want) {
			t.Fatalf("fetched %v, want %v", got, want)
		}
	})
	t.Run("RetryingImportHoldsBackAppendedEntries", func(t *testing.T) {
		t.Parallel()
		b, p := newBackend(t, extended, pgoutbox.Options{})
		ctx := t.Context()
		appendOne(t, b, p, outbox.Entry{ID: "A", Topic: "t", Key: "k"})
		r := imported("R", "k")
		r.Attempts, r.LastError, r.DueAt = 2, "broker down", time.Now().Add(time.Hour)
		mustImport(t, b, r, imported("other", "o"))
		l := acquire(t, b, 0)
		if got := fetchIDs(t, b, l); !slices.Equal(got, []string{"other"}) {
			t.Fatalf("fetched %v, want [other]: the retrying import holds A back", got)
		}
		info, err := b.Lookup(ctx, "R")
		if err != nil || info.Attempts != 2 || info.LastError != "broker down" || !info.DueAt.After(time.Now().Add(50*time.Minute)) {
			t.Fatalf("R = %+v, %v: want attempts, error and due time kept", info, err)
		}
		// Sent, it lets A go.
		if err := b.MarkSent(ctx, l, []string{"other"}); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Exec(ctx, "UPDATE "+pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()+" SET next_at = now() WHERE id = 'R'"); err != nil {
			t.Fatal(err)
		}
		if got := fetchIDs(t, b, l); !slices.Equal(got, []string{"R"}) {
			t.Fatalf("fetched %v, want [R] (A still held back behind it)", got)
		}
		if err := b.MarkSent(ctx, l, []string{"R"}); err != nil {
			t.Fatal(err)
		}
		if got := fetchIDs(t, b, l); !slices.Equal(got, []string{"A"}) {
			t.Fatalf("fetched %v, want [A]", got)
		}
	})
	t.Run("ScheduledImportKeepsDueTime", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, extended, pgoutbox.Options{})
		s := imported("S", "k")
		s.NotBefore = time.Now().Add(time.Hour).Truncate(time.Microsecond)
		s.DueAt = s.NotBefore
		mustImport(t, b, s)
		info, err := b.Lookup(t.Context(), "S")
		if err != nil || !info.DueAt.Equal(s.DueAt) || !info.NotBefore.Equal(s.NotBefore) {
			t.Fatalf("S = %+v, %v; want due and not-before %v", info, err, s.DueAt)
		}
		if got := fetchIDs(t, b, acquire(t, b, 0)); len(got) != 0 {
			t.Fatalf("fetched %v, want nothing (scheduled)", got)
		}
	})
}

func TestImport(t *testing.T) {
	t.Parallel()
	t.Run("FieldsKeptPartitionRecomputed", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, extended, pgoutbox.Options{Partitions: 8, KeySequence: true})
		ctx := t.Context()
		created := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
		e := outbox.EntryInfo{Entry: outbox.Entry{
			ID: "e1", Topic: "orders", Key: "key-7", Payload: []byte{0, 1, 2},
			Headers:   map[string]string{"h": "v\x00", outbox.HeaderKeySeq: "41"},
			Partition: 99, Attempts: 3, LastError: "boom", CreatedAt: created,
		}}
		parked := outbox.EntryInfo{Entry: outbox.Entry{ID: "p1", Key: "key-7", Attempts: 5, LastError: "dead"}, Parked: true}
		keyless := imported("nokey", "")
		if n := mustImport(t, b, e, parked, keyless); n != 3 {
			t.Fatalf("added %d, want 3", n)
		}
		got, err := b.Lookup(ctx, "e1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Partition != outbox.PartitionOf("key-7", 8) || got.Topic != "orders" || string(got.Payload) != "\x00\x01\x02" ||
			got.Headers["h"] != "v\x00" || got.Headers[outbox.HeaderKeySeq] != "41" || len(got.Headers) != 2 ||
			got.Attempts != 3 || got.LastError != "boom" || !got.CreatedAt.Equal(created) || got.Parked {
			t.Fatalf("Lookup = %+v", got)
		}
		pk, err := b.Lookup(ctx, "p1")
		if err != nil || !pk.Parked || pk.Attempts != 5 || !strings.HasSuffix(pk.LastError, "(stored last error: dead)") || pk.Topic != "" || !pk.DueAt.IsZero() {
			t.Fatalf("parked import = %+v, %v", pk, err)
		}
		if k, err := b.Lookup(ctx, "nokey"); err != nil || k.Partition != outbox.PartitionOf("", 8) || k.CreatedAt.IsZero() {
			t.Fatalf("keyless import = %+v, %v", k, err)
		}
		s, err := b.Stats(ctx)
		if err != nil || s.Pending != 2 || s.Parked != 1 {
			t.Fatalf("Stats = %+v, %v", s, err)
		}
	})
	t.Run("IdempotentByID", func(t *testing.T) {
		t.Parallel()
		b, p := newBackend(t, extended, pgoutbox.Options{})
		appendOne(t, b, p, outbox.Entry{ID: "appended", Topic: "t", Key: "k", Payload: []byte("original")})
		first := imported("dup", "k")
		second := imported("dup", "k")
		second.Payload = []byte("second")
		again := imported("appended", "k")
		if n := mustImport(t, b, first, second, again, imported("new", "k")); n != 2 {
			t.Fatalf("added %d, want 2 (dup once, new)", n)
		}
		if n := mustImport(t, b, first, imported("new", "k")); n != 0 {
			t.Fatalf("importing again added %d, want 0", n)
		}
		if e, _ := b.Lookup(t.Context(), "dup"); string(e.Payload) != "dup" {
			t.Errorf("dup has payload %q, want the first occurrence's", e.Payload)
		}
		if e, _ := b.Lookup(t.Context(), "appended"); string(e.Payload) != "original" {
			t.Errorf("appended entry changed to %q", e.Payload)
		}
	})
	t.Run("InvalidEntryAddsNothing", func(t *testing.T) {
		t.Parallel()
		b, _ := newBackend(t, extended, pgoutbox.Options{})
		bad := map[string]outbox.EntryInfo{
			"empty ID":      imported("", "k"),
			"long ID":       imported(strings.Repeat("i", outbox.MaxIDLen+1), "k"),
			"NUL in ID":     imported("a\x00b", "k"),
			"empty topic":   {Entry: outbox.Entry{ID: "x"}},
			"long topic":    {Entry: outbox.Entry{ID: "x", Topic: strings.Repeat("t", outbox.MaxTopicLen+1)}},
			"invalid topic": {Entry: outbox.Entry{ID: "x", Topic: "\xff"}},
			"long key":      imported("x", strings.Repeat("k", outbox.MaxKeyLen+1)),
		}
		for name, e := range bad {
			n, err := b.Import(t.Context(), []outbox.EntryInfo{imported("fine", "k"), e})
			if !errors.Is(err, outbox.ErrInvalidEntry) || n != 0 || !strings.Contains(err.Error(), "entry 1") {
				t.Errorf("%s: Import = %d, %v; want ErrInvalidEntry naming entry 1", name, n, err)
			}
		}
		if s, err := b.Stats(t.Context()); err != nil || s.Pending+s.Parked != 0 {
			t.Fatalf("Stats = %+v, %v: want nothing added", s, err)
		}
		if n, err := b.Import(t.Context(), nil); n != 0 || err != nil {
			t.Fatalf("Import(nil) = %d, %v", n, err)
		}
	})
}

func TestExport(t *testing.T) {
	t.Parallel()
	t.Run("EveryStateInAppendOrder", func(t *testing.T) {
		t.Parallel()
		b, p := newBackend(t, extended, pgoutbox.Options{Archive: true})
		ctx := t.Context()
		appendOne(t, b, p,
			outbox.Entry{ID: "due", Topic: "t", Key: "a"},
			outbox.Entry{ID: "failing", Topic: "t", Key: "b"},
			outbox.Entry{ID: "heldback", Topic: "t", Key: "b"},
			outbox.Entry{ID: "toPark", Topic: "t", Key: "c"},
			outbox.Entry{ID: "scheduled", Topic: "t", Key: "d", NotBefore: time.Now().Add(time.Hour)},
			outbox.Entry{ID: "claimed", Topic: "t", Key: "e"},
			outbox.Entry{ID: "requeued", Topic: "t", Key: "f"},
		)
		l := acquire(t, b, 0)
		if _, err := b.FindPendingBatch(ctx, l, 100); err != nil {
			t.Fatal(err)
		}
		if err := b.MarkFailed(ctx, l, []outbox.Failure{
			{ID: "failing", Error: "e1", Delay: time.Hour},
			{ID: "toPark", Error: "e2", Park: true},
			{ID: "requeued", Error: "e3", Park: true},
		}); err != nil {
			t.Fatal(err)
		}
		if n, err := b.Requeue(ctx, "requeued"); n != 1 || err != nil {
			t.Fatalf("Requeue = %d, %v", n, err)
		}
		mustImport(t, b, imported("imp1", "z"), imported("imp2", "z"))
		got, err := b.ExportBatch(ctx, l, 100)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range got {
			ids = append(ids, e.ID)
		}
		want := []string{"imp1", "imp2", "due", "failing", "heldback", "toPark", "scheduled", "claimed", "requeued"}
		if !slices.Equal(ids, want) {
			t.Fatalf("exported %v, want %v", ids, want)
		}
		byID := map[string]outbox.EntryInfo{}
		for _, e := range got {
			byID[e.ID] = e
		}
		if e := byID["failing"]; e.Attempts != 1 || e.LastError != "e1" || e.Parked || !e.DueAt.After(time.Now().Add(50*time.Minute)) {
			t.Errorf("failing = %+v", e)
		}
		if e := byID["toPark"]; !e.Parked || e.Attempts != 1 || e.LastError != "e2" || !e.DueAt.IsZero() {
			t.Errorf("toPark = %+v", e)
		}
		if e := byID["scheduled"]; e.NotBefore.IsZero() || !e.DueAt.Equal(e.NotBefore) {
			t.Errorf("scheduled = %+v", e)
		}
		if e := byID["due"]; e.Topic != "t" || e.Key != "a" || e.CreatedAt.IsZero() || e.DueAt.IsZero() || e.Partition != 0 {
			t.Errorf("due = %+v", e)
		}
		// Paging: the first two, removed, then the rest.
		page, err := b.ExportBatch(ctx, l, 2)
		if err != nil || len(page) != 2 || page[0].ID != "imp1" || page[1].ID != "imp2" {
			t.Fatalf("ExportBatch(2) = %v, %v", page, err)
		}
		if err := b.RemoveExported(ctx, l, []string{"imp1", "imp2", "unknown"}); err != nil {
			t.Fatal(err)
		}
		page, err = b.ExportBatch(ctx, l, 2)
		if err != nil || len(page) != 2 || page[0].ID != "due" || page[1].ID != "failing" {
			t.Fatalf("after RemoveExported, ExportBatch(2) = %v, %v", page, err)
		}
		// Removed whatever their state, never archived.
		if err := b.RemoveExported(ctx, l, want); err != nil {
			t.Fatal(err)
		}
		if rest, err := b.ExportBatch(ctx, l, 100); err != nil || len(rest) != 0 {
			t.Fatalf("ExportBatch after removing all = %v, %v", rest, err)
		}
		var archived int
		if err := p.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{b.Options().Schema, "outbox_archive"}.Sanitize()).Scan(&archived); err != nil || archived != 0 {
			t.Fatalf("%d archived (%v), want 0", archived, err)
		}
		if err := b.RemoveExported(ctx, l, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("Fenced", func(t *testing.T) {
		t.Parallel()
		b, p := newBackend(t, extended, pgoutbox.Options{Partitions: 2})
		ctx := t.Context()
		appendOne(t, b, p, outbox.Entry{ID: "x", Topic: "t", Key: "k"})
		part := outbox.PartitionOf("k", 2)
		old, err := b.AcquireLease(ctx, part, "old", 50*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if _, err := b.ExportBatch(ctx, old, 10); !errors.Is(err, outbox.ErrLeaseLost) {
			t.Fatalf("ExportBatch with an expired lease: %v, want ErrLeaseLost", err)
		}
		l := acquire(t, b, part)
		if err := b.RemoveExported(ctx, old, []string{"x"}); !errors.Is(err, outbox.ErrLeaseLost) {
			t.Fatalf("RemoveExported with a lost lease: %v, want ErrLeaseLost", err)
		}
		if _, err := b.Lookup(ctx, "x"); err != nil {
			t.Fatalf("the fenced remove removed x: %v", err)
		}
		if _, err := b.ExportBatch(ctx, l, 0); !errors.Is(err, outbox.ErrInvalidArgument) {
			t.Fatalf("limit 0: %v", err)
		}
		// Another partition's lease removes nothing of this one.
		other := acquire(t, b, 1-part)
		if err := b.RemoveExported(ctx, other, []string{"x"}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Lookup(ctx, "x"); err != nil {
			t.Fatalf("x removed through another partition's lease: %v", err)
		}
	})
	t.Run("CorruptRowExportedParked", func(t *testing.T) {
		t.Parallel()
		b, p := newBackend(t, extended, pgoutbox.Options{})
		ctx := t.Context()
		appendOne(t, b, p, outbox.Entry{ID: "bad", Topic: "t", Key: "k"})
		if _, err := p.Exec(ctx, "UPDATE "+pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()+` SET topic = '', headers = '\xdeadbeef00ff' WHERE id = 'bad'`); err != nil {
			t.Fatal(err)
		}
		got, err := b.ExportBatch(ctx, acquire(t, b, 0), 10)
		if err != nil || len(got) != 1 || !got[0].Parked || !strings.Contains(got[0].LastError, "empty topic column") || got[0].Headers != nil {
			t.Fatalf("ExportBatch = %+v, %v; want the row parked with the reason", got, err)
		}
		// And it imports elsewhere (parked, empty topic allowed).
		dst, _ := newBackend(t, extended, pgoutbox.Options{})
		if n := mustImport(t, dst, got...); n != 1 {
			t.Fatalf("imported %d", n)
		}
	})
}

func TestHold(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{Partitions: 2})
	ctx := t.Context()
	if hs, err := b.HoldState(ctx); err != nil || hs.Held || !hs.Since.IsZero() {
		t.Fatalf("HoldState before = %+v, %v", hs, err)
	}
	if err := b.Unhold(ctx); err != nil { // not held: a no-op
		t.Fatal(err)
	}
	if err := b.Hold(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	first, err := b.HoldState(ctx)
	if err != nil || !first.Held || first.Reason != "first" || first.Since.IsZero() || time.Since(first.Since) > time.Minute {
		t.Fatalf("HoldState = %+v, %v", first, err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := b.Hold(ctx, "second"); err != nil {
		t.Fatal(err)
	}
	second, err := b.HoldState(ctx)
	if err != nil || second.Reason != "second" || !second.Since.Equal(first.Since) {
		t.Fatalf("HoldState after holding again = %+v, %v; want since %v kept", second, err, first.Since)
	}
	// Appends, leases and stats work while held; fetches return nothing
	// but still check the lease.
	appendN(t, b, p, "e", 20, func(i int) string { return fmt.Sprint("k", i) })
	s, err := b.Stats(ctx)
	if err != nil || s.Pending != 20 || s.Due != 20 {
		t.Fatalf("Stats while held = %+v, %v", s, err)
	}
	if ps, err := b.PartitionStats(ctx); err != nil || len(ps) != 2 {
		t.Fatalf("PartitionStats while held = %v, %v", ps, err)
	}
	for part := range 2 {
		l := acquire(t, b, part)
		if got := fetchIDs(t, b, l); len(got) != 0 {
			t.Fatalf("partition %d fetched %v while held", part, got)
		}
		if batch, err := b.FetchBatch(ctx, l, 10); err != nil || len(batch.Entries)+len(batch.Parked) != 0 {
			t.Fatalf("FetchBatch while held = %+v, %v", batch, err)
		}
		if err := b.ReleaseLease(ctx, l); err != nil {
			t.Fatal(err)
		}
		if _, err := b.FindPendingBatch(ctx, l, 10); !errors.Is(err, outbox.ErrLeaseLost) {
			t.Fatalf("fetch with a released lease while held: %v, want ErrLeaseLost", err)
		}
	}
	// Another Backend on the same outbox sees the hold too.
	other, err := pgoutbox.New(ctx, p, b.Options())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if got := fetchIDs(t, other, acquire(t, other, 0)); len(got) != 0 {
		t.Fatalf("another Backend fetched %v while held", got)
	}
	if err := b.Unhold(ctx); err != nil {
		t.Fatal(err)
	}
	if hs, err := b.HoldState(ctx); err != nil || hs.Held || hs.Reason != "" || !hs.Since.IsZero() {
		t.Fatalf("HoldState after Unhold = %+v, %v", hs, err)
	}
	n := 0
	for part := range 2 {
		n += len(fetchIDs(t, b, acquire(t, b, part)))
	}
	if n != 20 {
		t.Fatalf("fetched %d after Unhold, want 20", n)
	}
}
