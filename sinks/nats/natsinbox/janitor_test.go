package natsinbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/effectlog"
	"github.com/outboxrelay/outbox/sinks/nats/natsinbox"
)

// Every Consumer with Options.Retention runs a janitor for as long as its
// Run runs (JetStream gives no ownership to elect one by): two consumers
// of one durable over one store both run one (both export
// outbox.inbox.oldest_age), together they remove every old record, each
// counted once, and each janitor stops with its Run.
func TestRetentionRunsAJanitorOnEveryConsumer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	store := inbox.NewMemory()
	durable := "c" + suffix()
	e.consumer(e.js, func(c *jetstream.ConsumerConfig) { c.Durable = durable })
	var meters []effectlog.Meter
	var stops []func() error
	for range 2 {
		m := effectlog.NewMeter()
		ib, err := inbox.New(store, inbox.Options{Logger: quietLogger(), MeterProvider: m.Provider})
		require.NoError(t, err)
		_, js := e.connect()
		cons, err := js.Consumer(ctxT(t), e.stream, durable)
		require.NoError(t, err)
		c, err := natsinbox.NewConsumer(ib, newEffects().Handler(isMsg, nil), cons, natsinbox.Options{
			Retention: time.Hour, JanitorInterval: 10 * time.Millisecond, Logger: quietLogger(),
		})
		require.NoError(t, err)
		meters = append(meters, m)
		stops = append(stops, runConsumer(t, c))
	}
	total := func() int64 { return meters[0].PurgedIDs(t) + meters[1].PurgedIDs(t) }
	for round := range 5 {
		effectlog.OldRecords(t, store, fmt.Sprintf("old%d", round), 40)
		want := int64(40 * (round + 1))
		eventually(t, fmt.Sprintf("the janitors removed %d old records", want), func() bool { return total() >= want })
		require.Equal(t, want, total(), "records removed, counted over both janitors")
	}
	require.NoError(t, store.InTx(context.Background(), func(ctx context.Context, tx *inbox.MemoryTx) error {
		_, err := store.Record(ctx, tx, []string{"fresh"})
		return err
	}))
	eventually(t, "both janitors exporting the oldest record's age", func() bool {
		return meters[0].ExportsOldest(t) && meters[1].ExportsOldest(t)
	})
	for i, stop := range stops {
		require.NoError(t, stop())
		require.False(t, meters[i].ExportsOldest(t), "consumer %d's janitor exports after its Run returned", i)
	}
}

func TestNewConsumerRefusesNegativeRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ib := newInbox(t, inbox.Options{})
	cons := e.consumer(e.js)
	for _, o := range []natsinbox.Options{{Retention: -time.Hour}, {Retention: time.Hour, JanitorInterval: -1}} {
		_, err := natsinbox.NewConsumer(ib, newEffects().Handler(isMsg, nil), cons, o)
		require.ErrorIs(t, err, inbox.ErrInvalidArgument)
		require.ErrorContains(t, err, "natsinbox: Options.Retention")
	}
}

// quietLogger drops every line.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
