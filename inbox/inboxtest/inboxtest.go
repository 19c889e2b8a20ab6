// Package inboxtest is the conformance suite for inbox stores
// (inbox.Store): a store author runs [Run] with a [Harness] that makes a
// fresh store per test, against the real database.
package inboxtest

import (
	"context"
	"errors"
	"testing"

	"github.com/outboxrelay/outbox/inbox"
)

// Harness makes stores for the suite.
type Harness[Tx any] struct {
	// New returns a new, empty store for one test, isolated from every
	// other test's (its own schema, database, table or key prefix), and
	// registers its cleanup with t.Cleanup. Required.
	New func(t *testing.T) inbox.Store[Tx]
}

// Run runs every case of the suite against stores made by h, each case a
// parallel subtest.
func Run[Tx any](t *testing.T, h Harness[Tx]) {
	t.Helper()
	if h.New == nil {
		t.Fatal("inboxtest: Harness.New is required")
	}
	for _, c := range cases[Tx]() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, h.New(t))
		})
	}
}

type testCase[Tx any] struct {
	name string
	run  func(t *testing.T, s inbox.Store[Tx])
}

func cases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{"RecordedOnce", recordedOnce[Tx]},
		{"RollbackRecordsNothing", rollbackRecordsNothing[Tx]},
	}
}

func record[Tx any](t *testing.T, s inbox.Store[Tx], ids ...string) []bool {
	t.Helper()
	var fresh []bool
	err := s.InTx(context.Background(), func(ctx context.Context, tx Tx) error {
		var err error
		fresh, err = s.Record(ctx, tx, ids)
		return err
	})
	if err != nil {
		t.Fatalf("Record(%q): %v", ids, err)
	}
	return fresh
}

func recordedOnce[Tx any](t *testing.T, s inbox.Store[Tx]) {
	if got := record(t, s, "a"); len(got) != 1 || !got[0] {
		t.Fatalf("first Record(a) = %v, want [true]", got)
	}
	if got := record(t, s, "a"); len(got) != 1 || got[0] {
		t.Fatalf("second Record(a) = %v, want [false]: an ID recorded by a committed transaction is not new", got)
	}
}

func rollbackRecordsNothing[Tx any](t *testing.T, s inbox.Store[Tx]) {
	errAbort := errors.New("abort")
	err := s.InTx(context.Background(), func(ctx context.Context, tx Tx) error {
		if _, err := s.Record(ctx, tx, []string{"r"}); err != nil {
			return err
		}
		return errAbort
	})
	if !errors.Is(err, errAbort) {
		t.Fatalf("InTx = %v, want fn's error", err)
	}
	if got := record(t, s, "r"); len(got) != 1 || !got[0] {
		t.Fatalf("Record(r) after a rolled-back Record(r) = %v, want [true]: a rolled-back transaction must record nothing", got)
	}
}
