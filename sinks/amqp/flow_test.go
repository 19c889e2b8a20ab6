package amqpsink_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
)

// TestBlockedConnectionHoldsPublishes raises the private node's memory
// alarm (vm_memory_high_watermark 0), which makes the broker block
// publishing connections (connection.blocked): a Publish then waits, and
// completes once the alarm clears; one whose deadline passes first fails
// transient with ErrBlocked, its message not written.
//
// Not parallel: the alarm holds every publisher of the node, so it runs
// while the parallel tests wait for the sequential ones.
func TestBlockedConnectionHoldsPublishes(t *testing.T) {
	n := privateNode(t)
	ctx := ctxT(t)
	tp := newTopo(t, n.URL())
	s := dialSink(t, n.URL(), amqpsink.Options{PublishTimeout: time.Minute})
	require.NoError(t, s.Publish(ctx, entries(tp.exchange, 1, func(int) string { return "k" }))[0])
	tp.read(1)
	alarm := func(on bool) {
		t.Helper()
		v := "0.4"
		if on {
			v = "0"
		}
		_, err := n.Ctl(context.Background(), "set_vm_memory_high_watermark", v)
		require.NoError(t, err)
	}
	alarm(true)
	t.Cleanup(func() { alarm(false) })
	// The broker blocks a connection when it next publishes: the first
	// publish after the alarm triggers the connection.blocked.
	trigger := entries(tp.exchange, 1, func(int) string { return "trigger" })
	triggered := make(chan error, 1)
	go func() { triggered <- s.Publish(ctx, trigger)[0] }()
	waitFor(t, func() bool { _, b := s.Blocked(); return b }, "connection.blocked")
	reason, _ := s.Blocked()
	t.Logf("blocked: %q", reason)
	before := tp.count()

	held := entries(tp.exchange, 1, func(int) string { return "k" })
	done := make(chan error, 1)
	go func() { done <- s.Publish(ctx, held)[0] }()
	select {
	case err := <-done:
		t.Fatalf("Publish returned while the connection was blocked: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	assert.Equal(t, before, tp.count(), "nothing written while blocked")

	// A publish whose deadline passes while blocked fails transient.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	gaveUp := entries(tp.exchange, 1, func(int) string { return "other" })
	err := s.Publish(short, gaveUp)[0]
	cancel()
	require.ErrorIs(t, err, amqpsink.ErrBlocked)
	assert.Equal(t, backoff.ClassTransient, backoff.ClassOf(err))

	alarm(false)
	require.NoError(t, <-done, "the held publish completes once the alarm clears")
	require.NoError(t, <-triggered)
	got := tp.read(2)
	assert.ElementsMatch(t, []string{trigger[0].ID, held[0].ID}, []string{got[0].MessageId, got[1].MessageId})
	assert.Empty(t, tp.drain(), "the publish that gave up while blocked was never written")
	_, blocked := s.Blocked()
	assert.False(t, blocked)
	require.NoError(t, s.Publish(ctx, []outbox.Entry{gaveUp[0]})[0])
}
