package exactlyonce_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/chaos/internal/exactlyonce"
)

// entries are keys a and b, three entries each, committed in seq order.
func entries() []exactlyonce.Entry {
	var es []exactlyonce.Entry
	for _, k := range []string{"a", "b"} {
		for s := int64(1); s <= 3; s++ {
			es = append(es, exactlyonce.Entry{ID: fmt.Sprintf("%s-%d", k, s), Key: k, Seq: s})
		}
	}
	return es
}

// effects numbers the IDs' effects 1, 2, 3, ... in the order given, each
// carrying its entry's key and number.
func effects(ids ...string) []exactlyonce.Effect {
	out := make([]exactlyonce.Effect, len(ids))
	for i, id := range ids {
		var k string
		var s int64
		_, _ = fmt.Sscanf(id, "%1s-%d", &k, &s)
		out[i] = exactlyonce.Effect{N: int64(i + 1), ID: id, Key: k, Seq: s, PID: 100 + i%2}
	}
	return out
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		entries []exactlyonce.Entry
		effects []exactlyonce.Effect
		ok      bool
		check   func(t *testing.T, r exactlyonce.Report)
	}{{
		name:    "EveryEntryOnceInKeyOrderPasses",
		entries: entries(),
		// Keys interleaved: only the order within a key matters.
		effects: effects("a-1", "b-1", "b-2", "a-2", "a-3", "b-3"),
		ok:      true,
		check: func(t *testing.T, r exactlyonce.Report) {
			require.Equal(t, 6, r.Entries)
			require.Equal(t, 6, r.Applied)
			require.Equal(t, 6, r.Effects)
			require.Equal(t, map[int]int{100: 3, 101: 3}, r.ByPID)
		},
	}, {
		name:    "MissingEntryIsFound",
		entries: entries(),
		effects: effects("a-1", "a-3", "b-1", "b-2", "b-3"),
		check: func(t *testing.T, r exactlyonce.Report) {
			require.Len(t, r.Missing, 1)
			require.Equal(t, "a-2", r.Missing[0].ID)
			require.Zero(t, r.Duplicates)
			require.Empty(t, r.OrderViolations, "a gap is not an order violation")
		},
	}, {
		name:    "DuplicatesAreCountedOncePerExtraEffect",
		entries: entries(),
		effects: effects("a-1", "a-2", "a-2", "a-3", "b-1", "b-2", "b-3", "a-2", "b-3"),
		check: func(t *testing.T, r exactlyonce.Report) {
			require.Equal(t, 3, r.Duplicates)
			require.Equal(t, 2, r.DuplicateIDs)
			require.Empty(t, r.Missing)
			require.Empty(t, r.OrderViolations, "a late duplicate is a duplicate, not an order violation")
		},
	}, {
		name:    "OrderViolationIsFound",
		entries: entries(),
		effects: effects("a-1", "a-3", "a-2", "b-1", "b-2", "b-3"),
		check: func(t *testing.T, r exactlyonce.Report) {
			require.Len(t, r.OrderViolations, 1)
			v := r.OrderViolations[0]
			require.Equal(t, "a-2", v.ID)
			require.Equal(t, int64(3), v.After)
			require.Equal(t, "a-3", v.AfterID)
			require.Zero(t, r.Duplicates)
			require.Empty(t, r.Missing)
		},
	}, {
		name:    "EffectsAreOrderedByNNotByPosition",
		entries: entries(),
		effects: func() []exactlyonce.Effect {
			fs := effects("a-1", "a-2", "a-3", "b-1", "b-2", "b-3")
			fs[0], fs[2] = fs[2], fs[0] // given out of order, N says the truth
			return fs
		}(),
		ok: true,
	}, {
		name:    "UnexpectedEffectIsFound",
		entries: entries(),
		effects: effects("a-1", "a-2", "a-3", "b-1", "b-2", "b-3", "c-1", "c-1"),
		check: func(t *testing.T, r exactlyonce.Report) {
			require.Len(t, r.Unexpected, 1, "one per ID")
			require.Equal(t, "c-1", r.Unexpected[0].ID)
		},
	}, {
		name:    "SeqMismatchIsFound",
		entries: entries(),
		effects: func() []exactlyonce.Effect {
			fs := effects("a-1", "a-2", "a-3", "b-1", "b-2", "b-3")
			fs[4].Seq = 7
			return fs
		}(),
		check: func(t *testing.T, r exactlyonce.Report) { require.Equal(t, 1, r.SeqMismatches) },
	}, {
		name:    "UnnumberedEffectIsCountedButPasses",
		entries: entries(),
		effects: func() []exactlyonce.Effect {
			fs := effects("a-1", "a-2", "a-3", "b-1", "b-2", "b-3")
			fs[1].Seq = 0
			return fs
		}(),
		ok:    true,
		check: func(t *testing.T, r exactlyonce.Report) { require.Equal(t, 1, r.Unnumbered) },
	}, {
		name: "UnknownEntryMayBeMissingButNotDuplicated",
		entries: append(entries(),
			exactlyonce.Entry{ID: "a-4", Key: "a", Seq: 4, Unknown: true},
			exactlyonce.Entry{ID: "b-4", Key: "b", Seq: 4, Unknown: true}),
		effects: effects("a-1", "a-2", "a-3", "b-1", "b-2", "b-3", "b-4", "b-4"),
		check: func(t *testing.T, r exactlyonce.Report) {
			require.Empty(t, r.Missing, "a-4's commit may not have happened")
			require.Equal(t, 2, r.Unknown)
			require.Equal(t, 1, r.UnknownApplied)
			require.Equal(t, 1, r.Duplicates)
		},
	}, {
		name: "ConfirmedUnknownCountsAsCommitted",
		entries: append([]exactlyonce.Entry{{ID: "a-1", Key: "a", Seq: 1, Unknown: true}},
			entries()...),
		effects: effects("a-2", "a-3", "b-1", "b-2", "b-3"),
		check: func(t *testing.T, r exactlyonce.Report) {
			require.Len(t, r.Missing, 1)
			require.Equal(t, "a-1", r.Missing[0].ID)
			require.Zero(t, r.Unknown)
		},
	}, {
		name:    "NothingAppliedIsAllMissing",
		entries: entries(),
		check: func(t *testing.T, r exactlyonce.Report) {
			require.Len(t, r.Missing, 6)
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := exactlyonce.Check(tc.entries, tc.effects)
			require.Equal(t, tc.ok, r.OK(), "%v", r)
			if tc.check != nil {
				tc.check(t, r)
			}
			if !tc.ok {
				require.Contains(t, r.String(), "NOT exactly once")
			}
		})
	}
}

func ExampleCheck() {
	committed := []exactlyonce.Entry{{ID: "e1", Key: "k", Seq: 1}, {ID: "e2", Key: "k", Seq: 2}}
	applied := []exactlyonce.Effect{{N: 1, ID: "e1", Key: "k", Seq: 1}, {N: 2, ID: "e2", Key: "k", Seq: 2}, {N: 3, ID: "e2", Key: "k", Seq: 2}}
	r := exactlyonce.Check(committed, applied)
	fmt.Println(r.OK(), r.Duplicates)
	// Output: false 1
}
