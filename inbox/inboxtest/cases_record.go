package inboxtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/outboxrelay/outbox/inbox"
)

func recordCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{"RecordedOnce", recordedOnce[Tx]},
		{"BatchDuplicatesAnsweredInOrder", batchDuplicates[Tx]},
		{"BatchAnswersInOrder", batchAnswersInOrder[Tx]},
		{"IDsComparedExactly", idsComparedExactly[Tx]},
		{"SameTransactionTwice", sameTransactionTwice[Tx]},
		{"LargeBatch", largeBatch[Tx]},
		{"NoIDs", noIDs[Tx]},
		{"EmptyIDInvalid", emptyIDInvalid[Tx]},
	}
}

func recordedOnce[Tx any](t *testing.T, e *env[Tx]) {
	wantAnswers(t, "first Record(a)", e.record("a"), []bool{true})
	wantAnswers(t, "second Record(a) (an ID a committed transaction recorded is not new)", e.record("a"), []bool{false})
	wantAnswers(t, "third Record(a, b)", e.record("a", "b"), []bool{false, true})
}

// batchDuplicates: a batch with IDs repeated inside it and IDs committed
// before; only the first occurrence of a new ID is new.
func batchDuplicates[Tx any](t *testing.T, e *env[Tx]) {
	e.record("old-1", "old-2")
	got := e.record("new-1", "old-1", "new-1", "new-2", "old-2", "new-2", "old-1", "new-3")
	wantAnswers(t, "Record(new-1 old-1 new-1 new-2 old-2 new-2 old-1 new-3)", got,
		[]bool{true, false, false, true, false, false, false, true})
	wantAnswers(t, "Record of the same IDs again", e.probe("new-1", "new-2", "new-3", "old-1"), all(4, false))
}

// batchAnswersInOrder: answers follow the order of the IDs given, not the
// order of the IDs (a store whose query returns rows sorted by ID, or in
// its index's order, must map them back).
func batchAnswersInOrder[Tx any](t *testing.T, e *env[Tx]) {
	e.record("a-old", "m-old")
	got := e.record("z-new", "a-old", "y-new", "m-old", "b-new")
	wantAnswers(t, "Record(z-new a-old y-new m-old b-new) with a-old and m-old committed", got,
		[]bool{true, false, true, false, true})
	// Many IDs, committed ones every third, in an order unlike any sort.
	var ids []string
	var want []bool
	for i := range 60 {
		id := fmt.Sprintf("id-%02d", (i*37)%60)
		ids = append(ids, id)
		want = append(want, (i*37)%60%3 != 0)
	}
	var old []string
	for i := 0; i < 60; i += 3 {
		old = append(old, fmt.Sprintf("id-%02d", i))
	}
	e.record(old...)
	wantAnswers(t, "Record of 60 IDs in a scrambled order, every third committed", e.record(ids...), want)
}

// idsComparedExactly: IDs differing only by case, trailing spaces,
// Unicode normalization or past a 64-byte prefix are different IDs (a SQL
// column must use a binary collation).
func idsComparedExactly[Tx any](t *testing.T, e *env[Tx]) {
	long := strings.Repeat("x", 199)
	ids := []string{
		"a", "A", "a ", " a", "a\t",
		"caf\u00e9", "cafe\u0301", "CAF\u00c9", "stra\u00dfe", "strasse",
		"\u65e5\u672c", "emoji-\U0001F600",
		long + "1", long + "2",
		strings.Repeat("\u00e9", 100), // 200 bytes
	}
	wantAnswers(t, fmt.Sprintf("Record of %d IDs that differ only in case, spaces, Unicode or past a prefix", len(ids)),
		e.record(ids...), all(len(ids), true))
	wantAnswers(t, "the same IDs again", e.probe(ids...), all(len(ids), false))
	wantAnswers(t, "IDs not recorded that a lax comparison would match", e.probe("A ", "Caf\u00e9", "STRASSE", long+"3"), all(4, true))
}

func noIDs[Tx any](t *testing.T, e *env[Tx]) {
	e.commit("Record(no IDs)", func(ctx context.Context, tx Tx) error {
		for _, ids := range [][]string{nil, {}} {
			got, err := e.s.Record(ctx, tx, ids)
			if err != nil || len(got) != 0 {
				t.Errorf("Record(%#v) = %v, %v; want no answers and nil", ids, got, err)
			}
		}
		return nil
	})
}

func emptyIDInvalid[Tx any](t *testing.T, e *env[Tx]) {
	err := e.s.InTx(e.ctx(), func(ctx context.Context, tx Tx) error {
		_, err := e.s.Record(ctx, tx, []string{"ok", ""})
		return err
	})
	if !errors.Is(err, inbox.ErrInvalidMessage) {
		t.Fatalf("Record(ok, \"\") = %v, want an error wrapping inbox.ErrInvalidMessage", err)
	}
	wantAnswers(t, "Record(ok) after the failed transaction", e.probe("ok"), []bool{true})
}

// sameTransactionTwice: an ID recorded by an earlier Record call of the
// same transaction is not new (inbox.Inbox.Apply called twice in one
// caller's transaction must not apply a message twice).
func sameTransactionTwice[Tx any](t *testing.T, e *env[Tx]) {
	e.record("old")
	e.commit("Record twice in one transaction", func(ctx context.Context, tx Tx) error {
		first, err := e.s.Record(ctx, tx, []string{"x", "old"})
		if err != nil {
			return err
		}
		second, err := e.s.Record(ctx, tx, []string{"y", "x", "old"})
		if err != nil {
			return err
		}
		wantAnswers(t, "Record(x, old)", first, []bool{true, false})
		wantAnswers(t, "Record(y, x, old) after Record(x, old) in the same transaction", second, []bool{true, false, false})
		return nil
	})
	wantAnswers(t, "Record(x, y) after the commit", e.probe("x", "y"), []bool{false, false})
}

// largeBatch: one Record of 3000 IDs, some committed before,
// answers each in order (a store must split what its database cannot take
// in one statement).
func largeBatch[Tx any](t *testing.T, e *env[Tx]) {
	const n = 3000
	var ids, old []string
	want := make([]bool, n)
	for i := range n {
		id := fmt.Sprintf("large-%04d-%s", (i*7919)%n, strings.Repeat("z", i%50))
		ids = append(ids, id)
		want[i] = (i*i)%7 < 3 // a pattern that does not repeat every 1000 IDs
		if !want[i] {
			old = append(old, id)
		}
	}
	e.record(old...)
	wantAnswers(t, fmt.Sprintf("Record of %d IDs, some committed", n), e.record(ids...), want)
	wantAnswers(t, "the same IDs again", e.probe(ids...), all(n, false))
}
