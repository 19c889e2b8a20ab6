package inboxtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outbox/inbox"
)

// optionalAreas are the areas of the optional interfaces s implements.
func optionalAreas[Tx any](s inbox.Store[Tx]) []area[Tx] {
	var out []area[Tx]
	if _, ok := s.(inbox.KeyRecorder[Tx]); ok {
		out = append(out, area[Tx]{"KeyRecorder", []testCase[Tx]{
			{"AnswersAsRecordAndKeySeqs", recorderAnswers[Tx]},
			{"GuardsKeys", recorderGuardsKeys[Tx]},
		}})
	}
	if _, ok := s.(inbox.Finisher[Tx]); ok {
		out = append(out, area[Tx]{"Finisher", []testCase[Tx]{
			{"WritesAsSetKeySeqsAndSaveOffsets", finisherWrites[Tx]},
			{"RolledBackWritesNothing", finisherRolledBack[Tx]},
		}})
	}
	if _, ok := s.(inbox.OldestReporter); ok {
		out = append(out, area[Tx]{"OldestReporter", oldestCases[Tx]()})
	}
	return out
}

// recorderAnswers: RecordWithKeySeqs answers as Record and KeySeqs would,
// records as Record does (nothing when rolled back), and takes no ids.
func recorderAnswers[Tx any](t *testing.T, e *env[Tx]) {
	r := e.s.(inbox.KeyRecorder[Tx])
	e.record("old")
	e.setSeqs(map[string]int64{"a": 3, "b": 5})
	e.peek("RecordWithKeySeqs (rolled back)", func(ctx context.Context, tx Tx) error {
		if _, _, err := r.RecordWithKeySeqs(ctx, tx, []string{"gone"}, []string{"a"}); err != nil {
			return err
		}
		return errRollback
	})
	e.commit("RecordWithKeySeqs", func(ctx context.Context, tx Tx) error {
		fresh, seqs, err := r.RecordWithKeySeqs(ctx, tx, []string{"z-new", "old", "z-new", "a-new"}, []string{"b", "absent", "a"})
		if err != nil {
			return err
		}
		wantAnswers(t, "RecordWithKeySeqs(z-new old z-new a-new) answers", fresh, []bool{true, false, false, true})
		if want := map[string]int64{"a": 3, "b": 5}; !maps.Equal(seqs, want) {
			t.Errorf("RecordWithKeySeqs(keys b absent a) numbers = %v, want %v", seqs, want)
		}
		fresh, seqs, err = r.RecordWithKeySeqs(ctx, tx, nil, []string{"a"})
		if err == nil && (len(fresh) != 0 || seqs["a"] != 3) {
			t.Errorf("RecordWithKeySeqs(no ids, [a]) = %v, %v; want no answers and a: 3", fresh, seqs)
		}
		if err != nil {
			return err
		}
		fresh, seqs, err = r.RecordWithKeySeqs(ctx, tx, []string{"b-new"}, nil)
		if err == nil && (len(fresh) != 1 || !fresh[0] || len(seqs) != 0) {
			t.Errorf("RecordWithKeySeqs([b-new], no keys) = %v, %v; want [true] and no numbers", fresh, seqs)
		}
		return err
	})
	wantAnswers(t, "Record(z-new a-new b-new gone) afterwards", e.probe("z-new", "a-new", "b-new", "gone"), []bool{false, false, false, true})
	err := e.s.InTx(e.ctx(), func(ctx context.Context, tx Tx) error {
		_, _, err := r.RecordWithKeySeqs(ctx, tx, []string{""}, []string{"a"})
		return err
	})
	if !errors.Is(err, inbox.ErrInvalidMessage) {
		t.Errorf("RecordWithKeySeqs of an empty ID = %v, want an error wrapping inbox.ErrInvalidMessage", err)
	}
}

// recorderGuardsKeys: concurrent read-and-set of a key read through
// RecordWithKeySeqs loses no update, for a committed key and new ones.
func recorderGuardsKeys[Tx any](t *testing.T, e *env[Tx]) {
	r := e.s.(inbox.KeyRecorder[Tx])
	var n atomic.Int64
	read := func(ctx context.Context, tx Tx, key string) (map[string]int64, error) {
		_, seqs, err := r.RecordWithKeySeqs(ctx, tx, []string{fmt.Sprintf("id-%d", n.Add(1))}, []string{key})
		return seqs, err
	}
	e.setSeqs(map[string]int64{"hot": 7})
	e.incrementConcurrently([]string{"hot"}, 15, map[string]int64{"hot": 7}, read)
	var keys []string
	for i := range 15 {
		keys = append(keys, fmt.Sprintf("new-%d", i))
	}
	e.incrementConcurrently(keys, 1, nil, read)
}

// finisherWrites: Finish sets key numbers and stores offsets as
// SetKeySeqs and SaveOffsets would, either part empty.
func finisherWrites[Tx any](t *testing.T, e *env[Tx]) {
	f := e.s.(inbox.Finisher[Tx])
	off := func(p int32, next int64) inbox.Offset {
		return inbox.Offset{Group: "g", Topic: "t", Partition: p, Next: next}
	}
	steps := []struct {
		seqs map[string]int64
		offs []inbox.Offset
	}{
		{map[string]int64{"a": 1, "b": 2}, []inbox.Offset{off(0, 5), off(1, 6)}},
		{nil, []inbox.Offset{off(0, 3)}},
		{map[string]int64{"b": 9}, nil},
		{nil, nil},
		{map[string]int64{}, []inbox.Offset{}},
	}
	for i, st := range steps {
		e.commit(fmt.Sprintf("Finish %d", i+1), func(ctx context.Context, tx Tx) error {
			return f.Finish(ctx, tx, st.seqs, st.offs)
		})
	}
	if got, want := e.seqs("a", "b"), map[string]int64{"a": 1, "b": 9}; !maps.Equal(got, want) {
		t.Errorf("KeySeqs(a, b) after the Finishes = %v, want %v", got, want)
	}
	if got, want := e.offsets("g", "t"), map[int32]int64{0: 3, 1: 6}; !maps.Equal(got, want) {
		t.Errorf("Offsets(g, t) after the Finishes = %v, want %v", got, want)
	}
}

func finisherRolledBack[Tx any](t *testing.T, e *env[Tx]) {
	f := e.s.(inbox.Finisher[Tx])
	e.peek("Finish (rolled back)", func(ctx context.Context, tx Tx) error {
		if err := f.Finish(ctx, tx, map[string]int64{"rk": 3}, []inbox.Offset{{Group: "g", Topic: "t", Next: 10}}); err != nil {
			return err
		}
		return errRollback
	})
	e.wantNothing("a rolled-back Finish")
}

// oldestCases are the cases of a store that implements
// inbox.OldestReporter.
func oldestCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{"ReportsOldest", oldestReportsOldest[Tx]},
	}
}

// oldestReportsOldest: Oldest reports nothing for a store that holds only
// offsets, then the time of the oldest record, key numbers included, and
// follows the purges: after each, the oldest record left; none once all
// are gone.
func oldestReportsOldest[Tx any](t *testing.T, e *env[Tx]) {
	r := e.s.(inbox.OldestReporter)
	oldest := func(what string) (time.Time, bool) {
		t.Helper()
		at, ok, err := r.Oldest(e.ctx())
		if err != nil {
			t.Fatalf("Oldest %s = %v", what, err)
		}
		return at, ok
	}
	e.saveOffsets(inbox.Offset{Group: "g", Topic: "t", Partition: 0, Next: 7})
	if at, ok := oldest("of a store holding only an offset"); ok {
		t.Fatalf("Oldest of a store holding only an offset = %v, true; want false (offsets are never purged)", at)
	}
	// 3 generations: with Backdate 3h, 2h and 1h old; without it, a
	// second apart. The first is a key number alone.
	start := time.Now().Add(-3*time.Hour - time.Minute)
	h := e.generations(generation{keys: []string{"oldkey"}}, generation{ids: []string{"mid"}}, generation{ids: []string{"new"}, keys: []string{"newkey"}})
	between := func(what string, lo, hi time.Time) {
		t.Helper()
		at, ok := oldest(what)
		if !ok || at.Before(lo) || !at.Before(hi) {
			t.Fatalf("Oldest %s = %v, %v; want true and a time in [%v, %v)", what, at, ok, lo, hi)
		}
	}
	between("with a key number set first", start, h[0])
	e.purge(h[0], 100)
	between("after the purge of the oldest key number", h[0], h[1])
	e.purge(h[1], 100)
	between("after the purge of the oldest ID", h[1], h[2])
	e.purge(h[2], 100)
	if at, ok := oldest("after every record was purged"); ok {
		t.Fatalf("Oldest after every record was purged = %v, true; want false", at)
	}
}
