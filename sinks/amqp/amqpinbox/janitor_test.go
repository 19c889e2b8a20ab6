package amqpinbox_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/effectlog"
	"github.com/outboxrelay/outbox/sinks/amqp/amqpinbox"
)

// Every Consumer with Options.Retention runs a janitor for as long as its
// Run runs (a queue gives no ownership to elect one by): two consumers of
// one queue over one store both run one (both export
// outbox.inbox.oldest_age), together they remove every old record, each
// counted once, and each janitor stops with its Run.
func TestRetentionRunsAJanitorOnEveryConsumer(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nil)
	store := inbox.NewMemory()
	var meters []effectlog.Meter
	var stops []func() error
	for range 2 {
		m := effectlog.NewMeter()
		ib, err := inbox.New(store, inbox.Options{Logger: quietLogger(), MeterProvider: m.Provider})
		require.NoError(t, err)
		_, ch := tp.channel()
		c, err := amqpinbox.NewConsumer(ib, newEffects().Handler(isDelivery, nil), ch, tp.queue, amqpinbox.Options{
			Retention: time.Hour, JanitorInterval: 10 * time.Millisecond, Logger: quietLogger(),
		})
		require.NoError(t, err)
		meters = append(meters, m)
		stop, _ := runConsumer(t, c)
		stops = append(stops, stop)
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

// eventually polls cond every 20ms, failing the test after a minute (a
// watchdog, not a timing assertion).
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// quietLogger drops every line.
func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
