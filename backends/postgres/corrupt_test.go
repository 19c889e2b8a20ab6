package pgoutbox_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// corruptions are the hand-made UPDATEs that stop an entry from being
// published, which FetchBatch parks: each with the SET clause that
// damages a row, the start of the reason it is parked with, and the SET
// clause that repairs it.
var corruptions = []struct {
	name, set, reason, fix string
}{
	{
		name:   "HeadersRunPastTheEnd", // issue 18's bytes
		set:    `headers = '\xdeadbeef00ff'::bytea`,
		reason: "pgoutbox: corrupt headers column: a length runs past the end; was it written by something other than pgoutbox?; the stored bytes cannot be decoded",
		fix:    "headers = NULL",
	},
	{
		name:   "HeadersTruncatedValue",
		set:    `headers = '\x0168'::bytea`, // a name "h" and no value length
		reason: "pgoutbox: corrupt headers column: a length runs past the end",
		fix:    `headers = '\x01680176'::bytea`, // {"h": "v"}, as EncodeHeaders writes it
	},
	{
		name:   "EmptyTopic",
		set:    "topic = ''",
		reason: "pgoutbox: empty topic column: the entry names no topic, so it cannot be published",
		fix:    "topic = 't'",
	},
}

// checkReason fails t unless reason starts with want and says how to fix
// the entry.
func checkReason(t *testing.T, what, reason, want string) {
	t.Helper()
	if !strings.HasPrefix(reason, want) || !strings.Contains(reason, "outbox show ID") ||
		!strings.Contains(reason, "requeue") || !strings.Contains(reason, "cancel") {
		t.Fatalf("%s: reason %q; want it to start with %q and name the fix (outbox show ID, requeue, cancel)", what, reason, want)
	}
}

func entryIDs(es []outbox.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

// TestCorruptColumnsAreParked damages one row by hand in each way of
// corruptions (as issue 18 did) and checks, over both query modes, that
// FetchBatch parks it once with a reason naming the column and reports
// it, while the rest of its partition, its key included, keeps flowing in
// order; that Parked and Lookup show its topic and key; that Requeue
// refuses it while requeueing a healthy parked entry in the same call; and
// that once the column is repaired by hand, Requeue takes it and it is
// delivered.
func TestCorruptColumnsAreParked(t *testing.T) {
	t.Parallel()
	for _, c := range corruptions {
		for _, mode := range []pgx.QueryExecMode{extended, pgx.QueryExecModeSimpleProtocol} {
			t.Run(c.name+"/"+mode.String(), func(t *testing.T) {
				t.Parallel()
				b, p := newBackend(t, mode, pgoutbox.Options{})
				ctx := t.Context()
				table := pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()
				h := map[string]string{"h": "v"}
				// Key k: a0 (to be damaged), a1, a2, a3; key j: b0, b1; c0 unkeyed.
				appendEntries(t, b, p,
					outbox.Entry{ID: "a0", Topic: "t", Key: "k", Payload: []byte("a0"), Headers: h},
					outbox.Entry{ID: "b0", Topic: "t", Key: "j", Payload: []byte("b0"), Headers: h},
					outbox.Entry{ID: "a1", Topic: "t", Key: "k", Payload: []byte("a1"), Headers: h},
					outbox.Entry{ID: "a2", Topic: "t", Key: "k", Payload: []byte("a2")},
					outbox.Entry{ID: "c0", Topic: "t", Payload: []byte("c0"), Headers: h},
					outbox.Entry{ID: "b1", Topic: "t", Key: "j", Payload: []byte("b1"), Headers: h},
					outbox.Entry{ID: "a3", Topic: "t", Key: "k", Payload: []byte("a3"), Headers: h},
				)
				if _, err := p.Exec(ctx, "UPDATE "+table+" SET "+c.set+" WHERE id = 'a0'"); err != nil {
					t.Fatal(err)
				}
				l, err := b.AcquireLease(ctx, 0, "o", time.Hour)
				require.NoError(t, err)

				batch, err := b.FetchBatch(ctx, l, 4)
				require.NoError(t, err, "FetchBatch with a damaged row; want the rest of the batch")
				if got, want := entryIDs(batch.Entries), []string{"b0", "a1", "a2"}; !slices.Equal(got, want) {
					t.Fatalf("first batch %v, want %v (a0 parked)", got, want)
				}
				if batch.Entries[1].Headers["h"] != "v" || batch.Entries[2].Headers != nil {
					t.Fatalf("healthy entries' headers %v, %v", batch.Entries[1].Headers, batch.Entries[2].Headers)
				}
				wantTopic := "t"
				if c.name == "EmptyTopic" {
					wantTopic = ""
				}
				if len(batch.Parked) != 1 || batch.Parked[0].ID != "a0" || batch.Parked[0].Topic != wantTopic || batch.Parked[0].Key != "k" {
					t.Fatalf("FetchBatch reported parks %+v; want a0 with topic %q and key k", batch.Parked, wantTopic)
				}
				reason := batch.Parked[0].Reason
				checkReason(t, "reported park", reason, c.reason)
				var state, lastErr string
				var attempts int
				require.NoError(t, p.QueryRow(ctx, "SELECT state, attempts, last_error FROM "+table+" WHERE id = 'a0'").Scan(&state, &attempts, &lastErr))
				if state != "parked" || attempts != 1 || lastErr != reason {
					t.Fatalf("the damaged row is %s, attempts %d, last error %q; want parked, 1, the reported reason %q", state, attempts, lastErr, reason)
				}
				require.NoError(t, b.MarkSent(ctx, l, entryIDs(batch.Entries)))
				batch, err = b.FetchBatch(ctx, l, 10)
				require.NoError(t, err)
				if got, want := entryIDs(batch.Entries), []string{"c0", "b1", "a3"}; !slices.Equal(got, want) || len(batch.Parked) != 0 {
					t.Fatalf("second batch %v, parks %+v; want %v and no park (a0 is reported once)", got, batch.Parked, want)
				}
				require.NoError(t, b.MarkSent(ctx, l, entryIDs(batch.Entries)))

				parked, err := b.Parked(ctx, "", 10)
				require.NoError(t, err, "Parked with a damaged row")
				if len(parked) != 1 || parked[0].ID != "a0" || parked[0].Topic != wantTopic || parked[0].Key != "k" ||
					string(parked[0].Payload) != "a0" || parked[0].Attempts != 1 || parked[0].LastError != reason {
					t.Fatalf("Parked = %+v; want a0 with topic %q, key, payload, attempts 1 and the reason", parked, wantTopic)
				}
				info, err := b.Lookup(ctx, "a0")
				require.NoError(t, err, "Lookup of the damaged row")
				if !info.Parked || info.Topic != wantTopic || info.Key != "k" || info.LastError != reason {
					t.Fatalf("Lookup = %+v", info)
				}

				// A healthy parked entry p0 is requeued in the same call that
				// refuses a0 (named twice: reported once); IDs of no parked
				// entry, one that text cannot hold included, are skipped.
				appendEntries(t, b, p, outbox.Entry{ID: "p0", Topic: "t", Key: "q", Payload: []byte("p0")})
				require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "p0", Error: "poison", Park: true}}))
				n, err := b.Requeue(ctx, "a0", "p0", "a0", "nope", "nul\x00")
				var refused *outbox.RequeueRefusedError
				if n != 1 || !errors.Is(err, outbox.ErrNotRequeueable) || !errors.As(err, &refused) {
					t.Fatalf("Requeue(a0, p0, a0, nope) = %d, %v; want 1 and a *RequeueRefusedError", n, err)
				}
				if len(refused.Refused) != 1 || refused.Refused[0].ID != "a0" || refused.Refused[0].Reason != reason {
					t.Fatalf("refused %+v; want a0 once, with the reason %q", refused.Refused, reason)
				}
				if info, err := b.Lookup(ctx, "a0"); err != nil || !info.Parked || info.Attempts != 1 {
					t.Fatalf("after the refusal, Lookup(a0) = %+v, %v; want it still parked", info, err)
				}
				batch, err = b.FetchBatch(ctx, l, 10)
				require.NoError(t, err)
				if got := entryIDs(batch.Entries); !slices.Equal(got, []string{"p0"}) || len(batch.Parked) != 0 {
					t.Fatalf("after Requeue: %v, parks %+v; want p0 alone", got, batch.Parked)
				}
				require.NoError(t, b.MarkSent(ctx, l, []string{"p0"}))

				// Repaired by hand, a0 is requeued and delivered.
				if _, err := p.Exec(ctx, "UPDATE "+table+" SET "+c.fix+" WHERE id = 'a0'"); err != nil {
					t.Fatal(err)
				}
				if n, err := b.Requeue(ctx, "a0"); n != 1 || err != nil {
					t.Fatalf("Requeue of the repaired a0 = %d, %v; want 1, nil", n, err)
				}
				batch, err = b.FetchBatch(ctx, l, 10)
				require.NoError(t, err)
				if len(batch.Entries) != 1 || batch.Entries[0].ID != "a0" || batch.Entries[0].Topic != "t" || len(batch.Parked) != 0 {
					t.Fatalf("after the repair: %+v, parks %+v; want a0 with topic t", batch.Entries, batch.Parked)
				}
				require.NoError(t, b.MarkSent(ctx, l, []string{"a0"}))
				if s, err := b.Stats(ctx); err != nil || s.Pending != 0 || s.Parked != 0 {
					t.Fatalf("Stats = %+v, %v; want an empty outbox", s, err)
				}
			})
		}
	}
}

// TestFetchBatchCountsParksAgainstLimit damages a run of rows longer than
// the limit: each FetchBatch parks and reports at most limit rows, entries
// and parks together, and the entry behind them comes out once they are
// parked; FindPendingBatch drops the reports and reads on.
func TestFetchBatchCountsParksAgainstLimit(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	ctx := t.Context()
	table := pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()
	appendN(t, b, p, "e", 6, func(int) string { return "k" })
	if _, err := p.Exec(ctx, "UPDATE "+table+" SET topic = '' WHERE id < 'e000005'"); err != nil {
		t.Fatal(err)
	}
	l, err := b.AcquireLease(ctx, 0, "o", time.Hour)
	require.NoError(t, err)
	var reported []string
	for range 2 {
		batch, err := b.FetchBatch(ctx, l, 2)
		require.NoError(t, err)
		if len(batch.Entries) != 0 || len(batch.Parked) != 2 {
			t.Fatalf("FetchBatch(limit 2) over damaged rows = %+v; want 2 parks and no entry", batch)
		}
		for _, c := range batch.Parked {
			reported = append(reported, c.ID)
		}
	}
	if want := []string{"e000000", "e000001", "e000002", "e000003"}; !slices.Equal(reported, want) {
		t.Fatalf("reported %v, want %v in order", reported, want)
	}
	// One damaged row left, then the healthy e000005: FindPendingBatch
	// parks the first and returns the second.
	got, err := b.FindPendingBatch(ctx, l, 1)
	require.NoError(t, err)
	if ids := entryIDs(got); !slices.Equal(ids, []string{"e000005"}) {
		t.Fatalf("FindPendingBatch(limit 1) = %v, want e000005", ids)
	}
	if s, err := b.Stats(ctx); err != nil || s.Parked != 5 {
		t.Fatalf("Stats = %+v, %v; want 5 parked", s, err)
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

// TestPartitionOutOfRange moves a row by hand to a partition the outbox
// does not have: no fetch returns it or fails over it; Stats counts it,
// PartitionStats lists only the real partitions; Lookup shows it with a
// reason naming the column; Requeue refuses it while it is parked there;
// moved back, it is requeued and delivered.
func TestPartitionOutOfRange(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{extended, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b, p := newBackend(t, mode, pgoutbox.Options{Partitions: 2})
			ctx := t.Context()
			table := pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()
			key := keyOf(t, 1, 2)
			appendEntries(t, b, p,
				outbox.Entry{ID: "lost", Topic: "t", Key: key, Payload: []byte("x")},
				outbox.Entry{ID: "next", Topic: "t", Key: key, Payload: []byte("y")},
			)
			if _, err := p.Exec(ctx, "UPDATE "+table+" SET partition = 7 WHERE id = 'lost'"); err != nil {
				t.Fatal(err)
			}
			for part := range 2 {
				l, err := b.AcquireLease(ctx, part, "o", time.Hour)
				require.NoError(t, err)
				batch, err := b.FetchBatch(ctx, l, 10)
				require.NoError(t, err)
				want := []string(nil)
				if part == 1 {
					want = []string{"next"}
				}
				if got := entryIDs(batch.Entries); !slices.Equal(got, want) || len(batch.Parked) != 0 {
					t.Fatalf("partition %d: %v, parks %+v; want %v", part, got, batch.Parked, want)
				}
				require.NoError(t, b.MarkSent(ctx, l, entryIDs(batch.Entries)))
			}
			s, err := b.Stats(ctx)
			require.NoError(t, err)
			if s.Pending != 1 || s.Due != 1 || s.OldestDue.IsZero() {
				t.Fatalf("Stats = %+v; want the lost row counted as pending and due", s)
			}
			ps, err := b.PartitionStats(ctx)
			require.NoError(t, err)
			if len(ps) != 2 || ps[0].Pending+ps[1].Pending != 0 {
				t.Fatalf("PartitionStats = %+v; want partitions 0 and 1 only, both empty", ps)
			}
			info, err := b.Lookup(ctx, "lost")
			require.NoError(t, err)
			wantReason := "pgoutbox: partition column is 7, outside 0..1: no relay fetches the entry"
			if info.Partition != 7 || info.Parked || info.Topic != "t" || info.Key != key || !strings.HasPrefix(info.LastError, wantReason) {
				t.Fatalf("Lookup = %+v; want partition 7 and a last error starting %q", info, wantReason)
			}
			if _, err := p.Exec(ctx, "UPDATE "+table+" SET state = 'parked', last_error = 'boom' WHERE id = 'lost'"); err != nil {
				t.Fatal(err)
			}
			parked, err := b.Parked(ctx, "", 10)
			require.NoError(t, err)
			if len(parked) != 1 || !strings.HasPrefix(parked[0].LastError, wantReason) || !strings.HasSuffix(parked[0].LastError, " (stored last error: boom)") {
				t.Fatalf("Parked = %+v; want the reason, then the stored last error", parked)
			}
			n, err := b.Requeue(ctx, "lost")
			var refused *outbox.RequeueRefusedError
			if n != 0 || !errors.As(err, &refused) || len(refused.Refused) != 1 || !strings.HasPrefix(refused.Refused[0].Reason, wantReason) {
				t.Fatalf("Requeue of the out-of-range row = %d, %v; want 0 and a refusal naming the partition column", n, err)
			}
			if _, err := p.Exec(ctx, "UPDATE "+table+" SET partition = 1 WHERE id = 'lost'"); err != nil {
				t.Fatal(err)
			}
			if n, err := b.Requeue(ctx, "lost"); n != 1 || err != nil {
				t.Fatalf("Requeue after the repair = %d, %v; want 1, nil", n, err)
			}
			l, err := b.AcquireLease(ctx, 1, "o", time.Hour)
			require.NoError(t, err)
			batch, err := b.FetchBatch(ctx, l, 10)
			require.NoError(t, err)
			if got := entryIDs(batch.Entries); !slices.Equal(got, []string{"lost"}) {
				t.Fatalf("after the repair: %v, want lost", got)
			}
		})
	}
}

// TestOddColumnValues writes values by hand that no pgoutbox statement
// writes but the column types allow, and that are not reasons to park:
// a negative attempts count reads as 0 (and MarkFailed counts on from
// there), the largest one does not make MarkFailed fail, and infinite
// timestamps read as the zero time without breaking a fetch, Parked,
// Lookup, Stats or PartitionStats.
func TestOddColumnValues(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{extended, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			b, p := newBackend(t, mode, pgoutbox.Options{})
			ctx := t.Context()
			table := pgx.Identifier{b.Options().Schema, "outbox"}.Sanitize()
			exec := func(sql string) {
				t.Helper()
				if _, err := p.Exec(ctx, "UPDATE "+table+" SET "+sql); err != nil {
					t.Fatal(err)
				}
			}
			appendN(t, b, p, "e", 4, func(int) string { return "k" })
			// e000000: negative attempts (not failing: it holds nothing back);
			// e000001: attempts at the integer maximum; e000002: infinite
			// created_at and not_before, next_at '-infinity' (due, first);
			// e000003: next_at 'infinity' (never due).
			exec("attempts = -5 WHERE id = 'e000000'")
			exec("attempts = 2147483647 WHERE id = 'e000001'")
			exec("created_at = 'infinity', not_before = '-infinity', next_at = '-infinity' WHERE id = 'e000002'")
			exec("next_at = 'infinity' WHERE id = 'e000003'")
			l, err := b.AcquireLease(ctx, 0, "o", time.Hour)
			require.NoError(t, err)
			// e000001 holds back e000002 (attempts > 0, same key), so the fetch
			// returns e000000 and e000001, in (next_at, seq) order.
			batch, err := b.FetchBatch(ctx, l, 10)
			require.NoError(t, err)
			if got := entryIDs(batch.Entries); !slices.Equal(got, []string{"e000000", "e000001"}) {
				t.Fatalf("fetch = %v, want e000000, e000001", got)
			}
			if batch.Entries[0].Attempts != 0 || batch.Entries[1].Attempts != 2147483647 {
				t.Fatalf("attempts read as %d, %d; want 0, 2147483647", batch.Entries[0].Attempts, batch.Entries[1].Attempts)
			}
			require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{
				{ID: "e000000", Error: "boom", Delay: -time.Hour},
				{ID: "e000001", Error: "boom", Park: true},
			}))
			var att []int32
			require.NoError(t, p.QueryRow(ctx, "SELECT array_agg(attempts ORDER BY id) FROM "+table+" WHERE id IN ('e000000', 'e000001')").Scan(&att))
			if !slices.Equal(att, []int32{1, 2147483647}) {
				t.Fatalf("attempts after MarkFailed %v; want 1 (from 0), 2147483647 (kept)", att)
			}
			// e000000 fails again and holds back its key; e000002 (next_at
			// -infinity) is behind it by seq. Unblock by parking e000000.
			batch, err = b.FetchBatch(ctx, l, 10)
			require.NoError(t, err)
			if got := entryIDs(batch.Entries); !slices.Equal(got, []string{"e000000"}) {
				t.Fatalf("second fetch %v, want e000000", got)
			}
			require.NoError(t, b.MarkFailed(ctx, l, []outbox.Failure{{ID: "e000000", Error: "boom", Park: true}}))
			batch, err = b.FetchBatch(ctx, l, 10)
			require.NoError(t, err)
			if got := entryIDs(batch.Entries); !slices.Equal(got, []string{"e000002"}) {
				t.Fatalf("third fetch %v, want e000002", got)
			}
			if e := batch.Entries[0]; !e.CreatedAt.IsZero() || !e.NotBefore.IsZero() {
				t.Fatalf("infinite timestamps read as CreatedAt %v, NotBefore %v; want zero", e.CreatedAt, e.NotBefore)
			}
			s, err := b.Stats(ctx)
			require.NoError(t, err)
			if s.Pending != 2 || s.Due != 1 || s.Parked != 2 || !s.OldestDue.IsZero() {
				t.Fatalf("Stats = %+v; want 2 pending, 1 due (at -infinity, so no oldest due time), 2 parked", s)
			}
			if _, err := b.PartitionStats(ctx); err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"e000002", "e000003"} {
				info, err := b.Lookup(ctx, id)
				require.NoError(t, err, "Lookup(%s)", id)
				if !info.DueAt.IsZero() || info.LastError != "" {
					t.Fatalf("Lookup(%s) = %+v; want a zero DueAt and no reason", id, info)
				}
			}
			exec("created_at = '-infinity', attempts = -1 WHERE id = 'e000001'")
			parked, err := b.Parked(ctx, "", 10)
			require.NoError(t, err)
			if len(parked) != 2 || !parked[1].CreatedAt.IsZero() || parked[1].Attempts != 0 {
				t.Fatalf("Parked = %+v; want e000001 with a zero CreatedAt and attempts 0", parked)
			}
		})
	}
}
