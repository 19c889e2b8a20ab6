package conformance

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
)

func appendCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{group: "Append", name: "VisibleOnlyAfterCommit", run: appendVisibleOnlyAfterCommit[Tx]},
		{group: "Append", name: "RollbackLeavesNothing", run: appendRollbackLeavesNothing[Tx]},
		{group: "Append", name: "FieldsRoundTrip", run: appendFieldsRoundTrip[Tx]},
		{group: "Append", name: "LargeBinaryPayloadAndUnicode", run: appendLargeBinaryPayloadAndUnicode[Tx]},
		{group: "Append", name: "InputNotRetained", run: appendInputNotRetained[Tx]},
		{group: "Append", name: "IdempotentInOneTx", run: appendIdempotentInOneTx[Tx]},
		{group: "Append", name: "IdempotentAcrossTxs", run: appendIdempotentAcrossTxs[Tx]},
		{group: "Append", name: "IdempotentWhileClaimed", run: appendIdempotentWhileClaimed[Tx]},
		{group: "Append", name: "IdempotentAfterParked", run: appendIdempotentAfterParked[Tx]},
		{group: "Append", name: "RepeatedIDInOneCallFirstWins", run: appendRepeatedIDInOneCall[Tx]},
		{group: "Append", name: "SentIDAppendsAgain", run: appendSentIDAgain[Tx]},
		{group: "Append", name: "GeneratedIDsAreUniqueUUIDv7", run: appendGeneratedIDs[Tx]},
		{group: "Append", name: "InvalidEntryRejectsWholeCall", run: appendInvalidEntry[Tx]},
		{group: "Append", name: "NoEntriesIsNoop", run: appendNoEntries[Tx]},
		{group: "Append", name: "PartitionIsPartitionOfKey", partitions: 4, run: appendPartitionOf[Tx]},
	}
}

func appendVisibleOnlyAfterCommit[Tx any](t *testing.T, s *env[Tx]) {
	tx := s.begin(t)
	if err := s.b.AppendInTx(s.ctx, tx, entry("e1", "k"), entry("e2", "")); err != nil {
		t.Fatalf("AppendInTx: %v", err)
	}
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "FindPendingBatch before the appending transaction committed (entries must be invisible until commit)", s.fetch(t, l, 10))
	if err := s.h.Commit(s.ctx, tx); err != nil {
		t.Fatalf("Harness.Commit: %v", err)
	}
	expectIDs(t, "FindPendingBatch after commit", s.fetch(t, l, 10), "e1", "e2")
}

func appendRollbackLeavesNothing[Tx any](t *testing.T, s *env[Tx]) {
	tx := s.begin(t)
	if err := s.b.AppendInTx(s.ctx, tx, entry("e1", "k"), entry("e2", "")); err != nil {
		t.Fatalf("AppendInTx: %v", err)
	}
	if err := s.h.Rollback(s.ctx, tx); err != nil {
		t.Fatalf("Harness.Rollback: %v", err)
	}
	expectIDs(t, "FindPendingBatch after the appending transaction rolled back", s.peek(t, 0))
	if in, ok := s.b.(outbox.Inspector); ok {
		st, err := in.Stats(s.ctx)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		if st.Pending != 0 || st.Parked != 0 || st.Due != 0 {
			t.Fatalf("Stats after a rolled-back append = %+v, want all zero", st)
		}
	}
	// A rolled-back ID is not reserved: appending it again works.
	s.appendCommit(t, entry("e1", "k"))
	expectIDs(t, "FindPendingBatch after appending a rolled-back ID again", s.peek(t, 0), "e1")
}

func appendFieldsRoundTrip[Tx any](t *testing.T, s *env[Tx]) {
	start := time.Now()
	want := []outbox.Entry{
		{ID: "e1", Topic: "orders.created", Key: "order-1", Payload: []byte(`{"id":1}`), Headers: map[string]string{"content-type": "application/json", "empty": ""}},
		{ID: "e2", Topic: "orders.created", Key: "", Payload: nil},
		// Fields the backend owns are ignored on input.
		{ID: "e3", Topic: "t", Key: "order-1", Payload: []byte{}, Attempts: 7, LastError: "input", Partition: 99, CreatedAt: time.Unix(1, 0)},
	}
	s.appendCommit(t, want...)
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	got := s.fetch(t, l, 10)
	expectIDs(t, "FindPendingBatch", got, "e1", "e2", "e3")
	for i, g := range got {
		if d := sameEntry(want[i], g); d != "" {
			t.Errorf("entry %s came back changed: %s", g.ID, d)
		}
		if g.Partition != 0 || g.Attempts != 0 || g.LastError != "" {
			t.Errorf("entry %s came back with Partition %d, Attempts %d, LastError %q; want 0, 0, \"\" (the backend sets them, inputs are ignored)", g.ID, g.Partition, g.Attempts, g.LastError)
		}
		if g.CreatedAt.IsZero() || g.CreatedAt.Before(start.Add(-time.Minute)) || g.CreatedAt.After(time.Now().Add(time.Minute)) {
			t.Errorf("entry %s has CreatedAt %v, want the append time by the backend's clock (the suite appended it at %v)", g.ID, g.CreatedAt, start)
		}
		if !g.NotBefore.IsZero() && g.NotBefore.After(time.Now().Add(time.Minute)) {
			t.Errorf("entry %s appended without NotBefore came back with NotBefore %v", g.ID, g.NotBefore)
		}
	}
}

func appendLargeBinaryPayloadAndUnicode[Tx any](t *testing.T, s *env[Tx]) {
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i*7 + i/256) // every byte value, zero bytes included
	}
	want := []outbox.Entry{
		{ID: "big", Topic: topic, Key: "k", Payload: big},
		{ID: "unicode-ключ-🔑", Topic: "тема/主题", Key: "ключ-🔑-键\t\"quoted\" {braces}", Payload: []byte("\x00\x01\xff\xfe\x00"),
			Headers: map[string]string{"заголовок": "значение 🔑", "x-emoji-🦀": "\x00 nul inside", "quote\"s": "a\nb"}},
		{ID: "zeros", Topic: topic, Key: "", Payload: make([]byte, 4096)},
	}
	s.appendCommit(t, want...)
	seen := map[string]outbox.Entry{}
	for p := range s.parts {
		for _, e := range s.peek(t, p) {
			seen[e.ID] = e
		}
	}
	for _, w := range want {
		g, ok := seen[w.ID]
		if !ok {
			t.Errorf("entry %q was appended and committed but FindPendingBatch never returned it", w.ID)
			continue
		}
		if d := sameEntry(w, g); d != "" {
			t.Errorf("entry %q did not round-trip exactly: %s", w.ID, d)
		}
	}
}

func appendInputNotRetained[Tx any](t *testing.T, s *env[Tx]) {
	payload := []byte("original")
	headers := map[string]string{"h": "original"}
	in := []outbox.Entry{{Topic: topic, Key: "k", Payload: payload, Headers: headers}}
	tx := s.begin(t)
	if err := s.b.AppendInTx(s.ctx, tx, in...); err != nil {
		t.Fatalf("AppendInTx: %v", err)
	}
	if in[0].ID != "" || in[0].Partition != 0 || string(payload) != "original" || headers["h"] != "original" || len(headers) != 1 {
		t.Fatalf("AppendInTx modified its input: entry now %+v, payload %q, headers %v", in[0], payload, headers)
	}
	// The caller may reuse its buffers as soon as AppendInTx returns, even
	// before commit.
	copy(payload, "CHANGED!")
	headers["h"] = "changed"
	headers["added"] = "x"
	if err := s.h.Commit(s.ctx, tx); err != nil {
		t.Fatalf("Harness.Commit: %v", err)
	}
	got := s.peek(t, 0)
	if len(got) != 1 {
		t.Fatalf("want the one appended entry, got %v", ids(got))
	}
	if string(got[0].Payload) != "original" || len(got[0].Headers) != 1 || got[0].Headers["h"] != "original" {
		t.Fatalf("the stored entry changed when the caller reused its payload and header buffers after AppendInTx returned: payload %q, headers %v; AppendInTx must not retain them", got[0].Payload, got[0].Headers)
	}
}

func appendIdempotentInOneTx[Tx any](t *testing.T, s *env[Tx]) {
	tx := s.begin(t)
	first := entry("e1", "k")
	second := entry("e1", "k")
	second.Payload = []byte("second append")
	if err := s.b.AppendInTx(s.ctx, tx, first, entry("e2", "k")); err != nil {
		t.Fatalf("AppendInTx: %v", err)
	}
	if err := s.b.AppendInTx(s.ctx, tx, second); err != nil {
		t.Fatalf("AppendInTx of an ID appended earlier in the same transaction: got %v, want nil (a no-op)", err)
	}
	if err := s.h.Commit(s.ctx, tx); err != nil {
		t.Fatalf("Harness.Commit: %v", err)
	}
	got := s.peek(t, 0)
	expectIDs(t, "entries after appending e1 twice in one transaction", got, "e1", "e2")
	if string(got[0].Payload) != string(first.Payload) {
		t.Fatalf("entry e1 has payload %q, want the first append's %q: a repeated append must be a no-op", got[0].Payload, first.Payload)
	}
}

func appendIdempotentAcrossTxs[Tx any](t *testing.T, s *env[Tx]) {
	first := entry("e1", "k")
	s.appendCommit(t, first, entry("e2", "k"))
	again := entry("e1", "k")
	again.Payload = []byte("second append")
	s.appendCommit(t, again, entry("e3", "k"))
	got := s.peek(t, 0)
	expectIDs(t, "entries after appending e1 again in a later transaction", got, "e1", "e2", "e3")
	if string(got[0].Payload) != string(first.Payload) {
		t.Fatalf("entry e1 has payload %q, want the first append's %q: a repeated append must be a no-op", got[0].Payload, first.Payload)
	}
}

func appendIdempotentWhileClaimed[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1")
	s.appendCommit(t, entry("e1", "k"), entry("e2", "k"))
	s.release(t, l, "e1")
	s.releaseLease(t, l)
	expectIDs(t, "entries after appending e1 again while a lease had it claimed", s.peek(t, 0), "e1", "e2")
}

func appendIdempotentAfterParked[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1")
	s.markFailed(t, l, outbox.Failure{ID: "e1", Error: "poison", Park: true})
	s.releaseLease(t, l)
	s.appendCommit(t, entry("e1", "k"))
	expectIDs(t, "entries after appending the ID of a parked entry again (must be a no-op, not a new pending entry)", s.peek(t, 0))
	if in, ok := s.b.(outbox.Inspector); ok {
		parked, err := in.Parked(s.ctx, "", 10)
		if err != nil {
			t.Fatalf("Parked: %v", err)
		}
		expectIDs(t, "Parked after appending the parked ID again", parked, "e1")
		if parked[0].Attempts != 1 || parked[0].LastError != "poison" {
			t.Fatalf("parked e1 has Attempts %d, LastError %q after its ID was appended again; want 1, \"poison\" (unchanged)", parked[0].Attempts, parked[0].LastError)
		}
	}
}

func appendRepeatedIDInOneCall[Tx any](t *testing.T, s *env[Tx]) {
	first := entry("e1", "k")
	first.Payload = []byte("first")
	first.Headers = map[string]string{"occurrence": "first"}
	second := outbox.Entry{ID: "e1", Topic: "other-topic", Key: "other-key", Payload: []byte("second"), Headers: map[string]string{"occurrence": "second"}}
	s.appendCommit(t, first, entry("e2", "k"), second, entry("e3", "k"))
	got := s.peek(t, 0)
	expectIDs(t, "entries after one AppendInTx call that repeats e1 (the first occurrence wins, in its place)", got, "e1", "e2", "e3")
	if d := sameEntry(first, got[0]); d != "" {
		t.Fatalf("e1 appended twice in one call came back as %s; want the first occurrence: %s", describeEntry(got[0]), d)
	}
}

func appendSentIDAgain[Tx any](t *testing.T, s *env[Tx]) {
	s.appendCommit(t, entry("e1", "k"), entry("e2", "k"))
	l := s.acquire(t, 0, s.owner("relay"), longTTL)
	expectIDs(t, "first fetch", s.fetch(t, l, 10), "e1", "e2")
	s.markSent(t, l, "e1")
	s.release(t, l, "e2")
	again := entry("e1", "k")
	again.Payload = []byte("appended again after it was sent")
	s.appendCommit(t, again)
	got := s.fetch(t, l, 10)
	expectIDs(t, "fetch after appending the ID of the sent e1 again (it is a new entry, appended after e2)", got, "e2", "e1")
	if d := sameEntry(again, got[1]); d != "" || got[1].Attempts != 0 {
		t.Fatalf("e1 appended again after it was sent came back with Attempts %d: %s; want the new append, unattempted", got[1].Attempts, d)
	}
	s.markSent(t, l, "e2", "e1")
	s.appendCommit(t, entry("e1", "k"))
	expectIDs(t, "fetch after appending e1 a third time, after its second delivery", s.fetch(t, l, 10), "e1")
}

func describeEntry(e outbox.Entry) string {
	return fmt.Sprintf("{ID %q, Topic %q, Key %q, Payload %q, Headers %v}", e.ID, e.Topic, e.Key, e.Payload, e.Headers)
}

func appendGeneratedIDs[Tx any](t *testing.T, s *env[Tx]) {
	var in []outbox.Entry
	for i := range 50 {
		in = append(in, outbox.Entry{Topic: topic, Key: fmt.Sprintf("k%d", i%3), Payload: []byte{byte(i)}})
	}
	s.appendCommit(t, in[:25]...)
	s.appendCommit(t, in[25:]...)
	got := s.peek(t, 0)
	if len(got) != 50 {
		t.Fatalf("appended 50 entries without IDs, FindPendingBatch returned %d", len(got))
	}
	seen := map[string]bool{}
	for _, e := range got {
		if !isUUIDv7(e.ID) {
			t.Fatalf("entry appended without an ID got ID %q, want a UUIDv7 (xxxxxxxx-xxxx-7xxx-[89ab]xxx-xxxxxxxxxxxx, lower-case hex)", e.ID)
		}
		if seen[e.ID] {
			t.Fatalf("generated ID %q was given to two entries", e.ID)
		}
		seen[e.ID] = true
	}
	// Appended in order, keys interleaved: the payload bytes must come back
	// in append order (one partition, all due at append time).
	for i, e := range got {
		if len(e.Payload) != 1 || int(e.Payload[0]) != i {
			t.Fatalf("entry %d of the fetch carries payload %v, want [%d]: entries without IDs must still come back in append order", i, e.Payload, i)
		}
	}
}

func isUUIDv7(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdef", c) {
				return false
			}
		}
	}
	return s[14] == '7' && strings.ContainsRune("89ab", rune(s[19]))
}

func appendInvalidEntry[Tx any](t *testing.T, s *env[Tx]) {
	bad := []struct {
		name string
		e    outbox.Entry
	}{
		{"empty topic", outbox.Entry{ID: "bad", Topic: ""}},
		{"ID too long", outbox.Entry{ID: strings.Repeat("x", outbox.MaxIDLen+1), Topic: topic}},
		{"ID not UTF-8", outbox.Entry{ID: "bad\xff", Topic: topic}},
		{"ID with NUL", outbox.Entry{ID: "bad\x00", Topic: topic}},
		{"topic too long", outbox.Entry{ID: "bad", Topic: strings.Repeat("t", outbox.MaxTopicLen+1)}},
		{"key too long", outbox.Entry{ID: "bad", Topic: topic, Key: strings.Repeat("k", outbox.MaxKeyLen+1)}},
		{"empty header name", outbox.Entry{ID: "bad", Topic: topic, Headers: map[string]string{"": "v"}}},
	}
	for _, c := range bad {
		tx := s.begin(t)
		err := s.b.AppendInTx(s.ctx, tx, entry("valid-before-"+c.name, "k"), c.e, entry("valid-after-"+c.name, ""))
		if !errors.Is(err, outbox.ErrInvalidEntry) {
			_ = s.h.Rollback(s.ctx, tx)
			t.Fatalf("AppendInTx with an entry with %s: got %v, want an error wrapping ErrInvalidEntry", c.name, err)
		}
		// The call wrote nothing, so the transaction may still commit.
		if err := s.h.Commit(s.ctx, tx); err != nil {
			t.Logf("Harness.Commit after a rejected append (%s) failed: %v; checking that nothing was written anyway", c.name, err)
		}
	}
	expectIDs(t, "entries after appends rejected with ErrInvalidEntry (nothing of a rejected call may be written, not even its valid entries)", s.peek(t, 0))
}

func appendNoEntries[Tx any](t *testing.T, s *env[Tx]) {
	tx := s.begin(t)
	if err := s.b.AppendInTx(s.ctx, tx); err != nil {
		t.Fatalf("AppendInTx with no entries: got %v, want nil", err)
	}
	if err := s.b.AppendInTx(s.ctx, tx, []outbox.Entry{}...); err != nil {
		t.Fatalf("AppendInTx with an empty slice: got %v, want nil", err)
	}
	if err := s.h.Commit(s.ctx, tx); err != nil {
		t.Fatalf("Harness.Commit: %v", err)
	}
	expectIDs(t, "entries after appending nothing", s.peek(t, 0))
}

func appendPartitionOf[Tx any](t *testing.T, s *env[Tx]) {
	var in []outbox.Entry
	want := map[string]int{}
	for i := range 40 {
		key := fmt.Sprintf("key-%d", i)
		if i%10 == 0 {
			key = ""
		}
		e := entry(fmt.Sprintf("e%d", i), key)
		in = append(in, e)
		want[e.ID] = outbox.PartitionOf(key, s.parts)
	}
	s.appendCommit(t, in...)
	found := 0
	for p := range s.parts {
		for _, e := range s.peek(t, p) {
			if want[e.ID] != p {
				t.Errorf("entry %s (key %q) was fetched from partition %d, want PartitionOf(key, %d) = %d", e.ID, e.Key, p, s.parts, want[e.ID])
			}
			found++
		}
	}
	if found != len(in) {
		t.Fatalf("appended %d entries over %d partitions, fetched %d from all partitions together", len(in), s.parts, found)
	}
}
