// Package checktest is the negative check a broker consumer's tests run:
// a broker holding one key's entries with one missing and two swapped must
// fail the history check, and the same deliveries must pass it when the
// history says that is what was committed.
package checktest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/chaos/history"
)

// Key is the key of the published entries.
const Key = "k"

// Published is what the test publishes to the broker, in order, under
// Key: the entries e1 to e6 committed in that order, without e2 (lost)
// and with e5 before e4 (reordered).
var Published = []string{"e1", "e3", "e5", "e4", "e6"}

// RequireCaught checks that ds, the consumer's deliveries of Published,
// show e2 lost and e4 out of order, and that the same deliveries pass the
// check against a history that committed them in the order published.
func RequireCaught(t testing.TB, ds []history.Delivery) {
	t.Helper()
	var h history.History
	for i := 1; i <= 6; i++ {
		h.Append(history.Entry{ID: fmt.Sprintf("e%d", i), Key: Key, Seq: int64(i), At: time.Now()})
	}
	for _, d := range ds {
		h.Delivered(d)
	}
	r := h.Check()
	require.False(t, r.OK())
	require.Len(t, r.Lost, 1)
	require.Equal(t, "e2", r.Lost[0].ID)
	require.Len(t, r.OrderViolations, 1)
	require.Equal(t, "e4", r.OrderViolations[0].ID)
	require.Zero(t, r.Duplicates)

	var ok history.History
	for i, id := range Published {
		ok.Append(history.Entry{ID: id, Key: Key, Seq: int64(i + 1)})
	}
	for _, d := range ds {
		ok.Delivered(d)
	}
	require.True(t, ok.Check().OK(), "%v", ok.Check())
}
