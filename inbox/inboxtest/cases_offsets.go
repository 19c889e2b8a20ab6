package inboxtest

import (
	"context"
	"errors"
	"maps"
	"math"
	"testing"

	"github.com/outboxrelay/outbox/inbox"
)

func offsetCases[Tx any]() []testCase[Tx] {
	return []testCase[Tx]{
		{"SavedWithTransactionOnly", offsetsWithTransactionOnly[Tx]},
		{"Overwritten", offsetsOverwritten[Tx]},
		{"IsolatedPerGroupAndTopic", offsetsIsolated[Tx]},
		{"UnknownEmpty", offsetsUnknownEmpty[Tx]},
	}
}

// offsetsWithTransactionOnly: offsets saved in a transaction are not
// visible before it commits and are gone if it rolls back.
func offsetsWithTransactionOnly[Tx any](t *testing.T, e *env[Tx]) {
	offs := []inbox.Offset{{Group: "g", Topic: "t", Partition: 0, Next: 5}, {Group: "g", Topic: "t", Partition: 1, Next: 8}}
	errAbort := errors.New("abort")
	err := e.s.InTx(e.ctx(), func(ctx context.Context, tx Tx) error {
		if err := e.s.SaveOffsets(ctx, tx, offs); err != nil {
			return err
		}
		return errAbort
	})
	if !errors.Is(err, errAbort) {
		t.Fatalf("InTx = %v, want fn's error", err)
	}
	if got := e.offsets("g", "t"); len(got) != 0 {
		t.Fatalf("Offsets after a rolled-back SaveOffsets = %v, want none", got)
	}
	e.commit("SaveOffsets", func(ctx context.Context, tx Tx) error {
		if err := e.s.SaveOffsets(ctx, tx, offs); err != nil {
			return err
		}
		if got := e.offsets("g", "t"); len(got) != 0 {
			t.Errorf("Offsets (outside the transaction) before the transaction that saved them committed = %v, want none", got)
		}
		return nil
	})
	if got, want := e.offsets("g", "t"), map[int32]int64{0: 5, 1: 8}; !maps.Equal(got, want) {
		t.Fatalf("Offsets after commit = %v, want %v", got, want)
	}
}

func offsetsOverwritten[Tx any](t *testing.T, e *env[Tx]) {
	e.saveOffsets(inbox.Offset{Group: "g", Topic: "t", Partition: 3, Next: 100})
	e.saveOffsets(inbox.Offset{Group: "g", Topic: "t", Partition: 3, Next: 40}, inbox.Offset{Group: "g", Topic: "t", Partition: 4, Next: 0})
	e.saveOffsets()
	if got, want := e.offsets("g", "t"), map[int32]int64{3: 40, 4: 0}; !maps.Equal(got, want) {
		t.Fatalf("Offsets after saving partition 3 at 100 then 40 (a rewind overwrites) and 4 at 0 = %v, want %v", got, want)
	}
	e.saveOffsets(inbox.Offset{Group: "g", Topic: "t", Partition: math.MaxInt32, Next: math.MaxInt64})
	if got := e.offsets("g", "t"); got[math.MaxInt32] != math.MaxInt64 || len(got) != 3 {
		t.Fatalf("Offsets after saving the largest partition and offset = %v", got)
	}
}

func offsetsIsolated[Tx any](t *testing.T, e *env[Tx]) {
	e.saveOffsets(
		inbox.Offset{Group: "g1", Topic: "t1", Partition: 0, Next: 1},
		inbox.Offset{Group: "g1", Topic: "t1", Partition: 1, Next: 4},
		inbox.Offset{Group: "g1", Topic: "t2", Partition: 0, Next: 2},
		inbox.Offset{Group: "g2", Topic: "t1", Partition: 0, Next: 3},
		inbox.Offset{Group: "G1", Topic: "t1", Partition: 0, Next: 5},
		inbox.Offset{Group: "g1", Topic: "T1", Partition: 0, Next: 6},
	)
	for _, c := range []struct {
		group, topic string
		want         map[int32]int64
	}{
		{"g1", "t1", map[int32]int64{0: 1, 1: 4}},
		{"g1", "t2", map[int32]int64{0: 2}},
		{"g2", "t1", map[int32]int64{0: 3}},
		{"G1", "t1", map[int32]int64{0: 5}},
		{"g1", "T1", map[int32]int64{0: 6}},
	} {
		if got := e.offsets(c.group, c.topic); !maps.Equal(got, c.want) {
			t.Errorf("Offsets(%q, %q) = %v, want %v (offsets are per group and topic, compared exactly)", c.group, c.topic, got, c.want)
		}
	}
}

func offsetsUnknownEmpty[Tx any](t *testing.T, e *env[Tx]) {
	e.saveOffsets(inbox.Offset{Group: "g", Topic: "t", Partition: 0, Next: 1})
	for _, gt := range [][2]string{{"g", "other"}, {"other", "t"}, {"", ""}} {
		if got := e.offsets(gt[0], gt[1]); len(got) != 0 {
			t.Errorf("Offsets(%q, %q) = %v, want none", gt[0], gt[1], got)
		}
	}
}
