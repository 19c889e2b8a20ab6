package kafkasink_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

func TestTopicRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		topic string
		want  string // "" = legal
	}{
		{"orders", ""},
		{"Orders.v2_eu-west", ""},
		{strings.Repeat("a", 249), ""},
		{"...", ""},
		{"", "cannot be empty"},
		{".", "not only dots"},
		{"..", "not only dots"},
		{strings.Repeat("a", 250), "at most 249 characters, this one has 250"},
		{"bad topic/with space", `byte 3 is ' '`},
		{"ordérs", "[a-zA-Z0-9._-]"},
	} {
		err := kafkasink.TopicRule(tc.topic)
		if tc.want == "" {
			require.NoError(t, err, "%q", tc.topic)
			continue
		}
		require.ErrorContains(t, err, tc.want, "%q", tc.topic)
	}
}

// TestLimitsRejectAtAppend: a backend given kafkasink.Limits rejects an
// oversized payload and an illegal topic in the caller's transaction.
func TestLimitsRejectAtAppend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := memory.New(memory.Options{Limits: kafkasink.Limits(10)})
	defer b.Close()
	for _, e := range []outbox.Entry{
		{ID: "big", Topic: "orders", Payload: make([]byte, 11)},
		{ID: "bad", Topic: "bad topic/with space"},
	} {
		tx := b.Begin()
		err := b.AppendInTx(ctx, tx, e)
		require.ErrorIs(t, err, outbox.ErrInvalidEntry)
		require.ErrorContains(t, err, e.ID)
		require.NoError(t, tx.Commit())
		_, err = b.Lookup(ctx, e.ID)
		require.ErrorIs(t, err, outbox.ErrNotFound, "nothing was appended")
	}
	tx := b.Begin()
	require.NoError(t, b.AppendInTx(ctx, tx, outbox.Entry{ID: "ok", Topic: "orders", Payload: make([]byte, 10)}))
	require.NoError(t, tx.Commit())
	require.Equal(t, 0, kafkasink.Limits(0).MaxPayload)
}
