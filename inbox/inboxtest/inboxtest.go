// Package inboxtest is the conformance suite for inbox stores
// (inbox.Store): a store author runs [Run] with a [Harness] that makes a
// fresh store per test, against the real database.
//
// # Areas
//
// The cases are grouped by area, each case a parallel subtest named
// "Area/Case" for the behaviour it pins:
//
//   - Record: an ID is new once; batches answer in order, with
//     duplicates inside the batch and against committed IDs; IDs are
//     compared byte for byte (case, trailing spaces, Unicode, 200-byte
//     IDs); empty input and empty IDs.
//   - Tx: a transaction rolled back (by an error or a panic, which InTx
//     re-raises) leaves no record, key number or offset.
//   - Concurrent: handlers of the same ID on many goroutines, through
//     inbox.Inbox.Handle with retries: exactly one applies; different
//     IDs all apply; an uncommitted record of an ID that then rolls back
//     does not make another handler of the ID skip it.
//   - KeySeqs: round trip, absent keys absent, keys compared exactly,
//     concurrent updates of one key serialize (no lost update), also from
//     an absent key.
//   - Offsets: stored with the transaction only, overwritten, isolated per
//     group and topic, unknown ones empty.
//   - Purge: bounded by its limit, oldest first, only before the horizon,
//     keys too, offsets never, limit < 1 rejected, records of a
//     transaction still open kept and never waited for, the janitor
//     (inbox.PurgeOnce) across batches, concurrent purges and concurrent
//     janitors removing and counting each record once.
//   - Inbox: the portable layer over the store: duplicates skip the
//     handler, gaps are reported and applied, a handler's error rolls
//     back, offsets are stored with the batch.
//   - KeyRecorder, Finisher, OldestReporter: only for a store that
//     implements these optional interfaces (Run asks a store made by
//     Harness.New before the cases): the first two's methods do what the
//     calls they combine do, guards and rollbacks included (the Inbox
//     cases then go through them too); Oldest reports the oldest record,
//     key numbers included and offsets not, and follows the purges.
//
// # Requirements
//
// The store must serve at least four transactions at once (the
// concurrency cases run several goroutines, and some cases read
// committed state with Offsets or Purge while a transaction is open).
// The suite is its own proof: inboxtest's tests run it against
// inbox.Memory, which passes, and against deliberately broken wrappers of
// it, each of which some named case must fail.
package inboxtest

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/outboxrelay/outbox/inbox"
)

// Harness makes stores for the suite.
type Harness[Tx any] struct {
	// New returns a new, empty store for one test, isolated from every
	// other test's (its own schema, database, table or key prefix), and
	// registers its cleanup with t.Cleanup. Required.
	New func(t *testing.T) inbox.Store[Tx]

	// Backdate moves the committed records of ids (the time each was
	// recorded) and of keys (the time each key's number was last set) in
	// s back by d, as if they had been written d earlier, and fails t if
	// it cannot (a SQL store: UPDATE ... SET applied_at = applied_at - d;
	// inbox.Memory: its Backdate method). Optional: without it, the Purge
	// cases wait about a second between the records they want older and
	// newer (so that a store clock with a resolution of a second tells
	// them apart), which makes them slower but not weaker.
	Backdate func(t *testing.T, s inbox.Store[Tx], d time.Duration, ids, keys []string)
}

// Run runs every case of the suite against stores made by h, each case a
// parallel subtest "Area/Case" with a store of its own.
func Run[Tx any](t *testing.T, h Harness[Tx]) {
	t.Helper()
	if h.New == nil {
		t.Fatal("inboxtest: Harness.New is required")
	}
	probe := h.New(t) // which optional interfaces the stores implement
	for _, a := range append(areas[Tx](), optionalAreas(probe)...) {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range a.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t, &env[Tx]{t: t, s: h.New(t), h: h})
				})
			}
		})
	}
}

type area[Tx any] struct {
	name  string
	cases []testCase[Tx]
}

type testCase[Tx any] struct {
	name string
	run  func(t *testing.T, e *env[Tx])
}

func areas[Tx any]() []area[Tx] {
	return []area[Tx]{
		{"Record", recordCases[Tx]()},
		{"Tx", txCases[Tx]()},
		{"Concurrent", concurrentCases[Tx]()},
		{"KeySeqs", keySeqCases[Tx]()},
		{"Offsets", offsetCases[Tx]()},
		{"Purge", purgeCases[Tx]()},
		{"Inbox", inboxCases[Tx]()},
	}
}

// caseTimeout bounds every store call of a case: a store that blocks
// where it must not fails the case instead of hanging the suite.
const caseTimeout = 2 * time.Minute

// env is one case's store and its helpers. Each helper fails the test on
// an unexpected error.
type env[Tx any] struct {
	t *testing.T
	s inbox.Store[Tx]
	h Harness[Tx]
}

// errRollback rolls back a transaction a helper only looks through.
var errRollback = errors.New("inboxtest: roll back")

func (e *env[Tx]) ctx() context.Context {
	ctx, cancel := context.WithTimeout(e.t.Context(), caseTimeout)
	e.t.Cleanup(cancel)
	return ctx
}

// commit runs fn in a transaction that must commit.
func (e *env[Tx]) commit(what string, fn func(ctx context.Context, tx Tx) error) {
	e.t.Helper()
	if err := e.s.InTx(e.ctx(), fn); err != nil {
		e.t.Fatalf("%s: InTx = %v, want nil", what, err)
	}
}

// peek runs fn in a transaction it then rolls back.
func (e *env[Tx]) peek(what string, fn func(ctx context.Context, tx Tx) error) {
	e.t.Helper()
	if err := e.s.InTx(e.ctx(), fn); !errors.Is(err, errRollback) {
		e.t.Fatalf("%s: InTx = %v, want the rollback fn returned", what, err)
	}
}

// record records ids in a committed transaction and returns the answers.
func (e *env[Tx]) record(ids ...string) []bool {
	e.t.Helper()
	var fresh []bool
	e.commit("Record", func(ctx context.Context, tx Tx) error {
		var err error
		fresh, err = e.s.Record(ctx, tx, ids)
		return err
	})
	e.checkLen("Record", ids, fresh)
	return fresh
}

// probe answers Record(ids) in a transaction it rolls back: which of ids
// are not recorded, without recording them.
func (e *env[Tx]) probe(ids ...string) []bool {
	e.t.Helper()
	var fresh []bool
	e.peek("Record (rolled back)", func(ctx context.Context, tx Tx) error {
		var err error
		if fresh, err = e.s.Record(ctx, tx, ids); err != nil {
			return err
		}
		return errRollback
	})
	e.checkLen("Record", ids, fresh)
	return fresh
}

func (e *env[Tx]) checkLen(what string, ids []string, fresh []bool) {
	e.t.Helper()
	if len(fresh) != len(ids) {
		e.t.Fatalf("%s(%q) returned %d answers, want one per ID (%d)", what, ids, len(fresh), len(ids))
	}
}

// setSeqs sets key numbers in a committed transaction.
func (e *env[Tx]) setSeqs(seqs map[string]int64) {
	e.t.Helper()
	e.commit("SetKeySeqs", func(ctx context.Context, tx Tx) error {
		return e.s.SetKeySeqs(ctx, tx, seqs)
	})
}

// seqs reads key numbers in a transaction it rolls back.
func (e *env[Tx]) seqs(keys ...string) map[string]int64 {
	e.t.Helper()
	var got map[string]int64
	e.peek("KeySeqs", func(ctx context.Context, tx Tx) error {
		var err error
		if got, err = e.s.KeySeqs(ctx, tx, keys); err != nil {
			return err
		}
		return errRollback
	})
	return got
}

// saveOffsets stores offsets in a committed transaction.
func (e *env[Tx]) saveOffsets(offs ...inbox.Offset) {
	e.t.Helper()
	e.commit("SaveOffsets", func(ctx context.Context, tx Tx) error {
		return e.s.SaveOffsets(ctx, tx, offs)
	})
}

// offsets reads the committed offsets of group and topic.
func (e *env[Tx]) offsets(group, topic string) map[int32]int64 {
	e.t.Helper()
	got, err := e.s.Offsets(e.ctx(), group, topic)
	if err != nil {
		e.t.Fatalf("Offsets(%q, %q) = %v", group, topic, err)
	}
	return got
}

// purge calls Purge, which must succeed.
func (e *env[Tx]) purge(before time.Time, limit int) (ids, keys int) {
	e.t.Helper()
	ids, keys, err := e.s.Purge(e.ctx(), before, limit)
	if err != nil {
		e.t.Fatalf("Purge(limit %d) = %v", limit, err)
	}
	return ids, keys
}

// inbox is an Inbox over the case's store that retries conflicts many
// times and reports to no one.
func (e *env[Tx]) inbox(opts inbox.Options) *inbox.Inbox[Tx] {
	e.t.Helper()
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = 1000
	}
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.MeterProvider = noop.NewMeterProvider()
	ib, err := inbox.New(e.s, opts)
	if err != nil {
		e.t.Fatalf("inbox.New: %v", err)
	}
	return ib
}

// generation is records written together: IDs recorded and key numbers
// set.
type generation struct {
	ids  []string
	keys []string
}

// generations writes gens in order, each older than the next, and returns
// horizons: horizons[i] is a time after generation i's records and before
// generation i+1's, the last one before any record written after
// generations returns, by the store's clock.
//
// With Harness.Backdate, generation i of n is moved back by n-i hours and
// horizons[i] is n-i-1 hours and a half ago; without it, generations waits
// 1.1s before and after taking each horizon.
func (e *env[Tx]) generations(gens ...generation) []time.Time {
	e.t.Helper()
	n := len(gens)
	horizons := make([]time.Time, n)
	for i, g := range gens {
		e.write(g)
		if e.h.Backdate != nil {
			continue
		}
		time.Sleep(1100 * time.Millisecond)
		horizons[i] = time.Now()
		time.Sleep(1100 * time.Millisecond)
	}
	if e.h.Backdate == nil {
		return horizons
	}
	now := time.Now()
	for i, g := range gens {
		e.h.Backdate(e.t, e.s, time.Duration(n-i)*time.Hour, g.ids, g.keys)
		horizons[i] = now.Add(-time.Duration(n-i-1)*time.Hour - 30*time.Minute)
	}
	return horizons
}

// write records g's IDs and sets its keys to 1, committed.
func (e *env[Tx]) write(g generation) {
	e.t.Helper()
	e.commit("write records", func(ctx context.Context, tx Tx) error {
		if len(g.ids) > 0 {
			if _, err := e.s.Record(ctx, tx, g.ids); err != nil {
				return err
			}
		}
		seqs := map[string]int64{}
		for _, k := range g.keys {
			seqs[k] = 1
		}
		return e.s.SetKeySeqs(ctx, tx, seqs)
	})
}

// want fails the test when got is not want.
func wantAnswers(t *testing.T, what string, got, want []bool) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// all returns n copies of v.
func all(n int, v bool) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = v
	}
	return out
}
