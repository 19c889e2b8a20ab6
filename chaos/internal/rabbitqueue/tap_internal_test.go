package rabbitqueue

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/chaos/history"
)

func TestStampFallsBackToNeighbours(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tap := &Tap{times: map[string][]time.Time{
		"a": {at(1)},
		"b": {at(2), at(9)}, // b arrived twice
		"d": {at(4)},
	}}
	ds := []history.Delivery{{ID: "x"}, {ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}, {ID: "b"}, {ID: "a"}}
	require.Equal(t, 3, tap.Stamp(ds), "x, c and the second a were not seen")
	want := []time.Time{
		at(1), // x: unseen and first: the earliest arrival
		at(1), // a
		at(2), // b
		at(2), // c: unseen: the delivery before it
		at(4), // d
		at(9), // b's second arrival
		at(9), // a's second copy: unseen: max(previous, a's latest)
	}
	for i := range ds {
		require.Equal(t, want[i], ds[i].At, "delivery %d (%s)", i, ds[i].ID)
	}
}
