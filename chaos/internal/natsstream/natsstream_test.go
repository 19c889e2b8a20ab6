package natsstream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox/chaos/internal/checktest"
	"github.com/outboxrelay/outbox/chaos/internal/natsstream"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// stream creates a stream of its own on the shared server (or skips) and
// returns a JetStream context to publish to it.
func stream(t *testing.T) (string, jetstream.JetStream) {
	t.Helper()
	url := testenv.NATSURL()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		testenv.Unavailable(t, "NATS", "OUTBOX_NATS_URL", err)
	}
	t.Cleanup(nc.Close)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "chaos-test-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, natsstream.Setup(ctx, url, natsstream.Stream{Name: name, Duplicates: time.Minute}))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, natsstream.Delete(ctx, url, name))
	})
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return name, js
}

func publish(t *testing.T, js jetstream.JetStream, subject, id, key string) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Header.Set(natsstream.IDHeader, id)
	m.Header.Set(natsstream.KeyHeader, key)
	m.Data = []byte("payload of " + id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(id))
	require.NoError(t, err)
}

func TestConsumeReturnsTheStreamInOrder(t *testing.T) {
	t.Parallel()
	name, js := stream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ds, err := natsstream.Consume(ctx, testenv.NATSURL(), name)
	require.NoError(t, err)
	require.Empty(t, ds, "an empty stream")
	tap, err := natsstream.StartTap(testenv.NATSURL(), name)
	require.NoError(t, err)
	defer tap.Close()

	before := time.Now()
	for i := range 2500 {
		publish(t, js, name, fmt.Sprintf("id-%04d", i), fmt.Sprintf("k%d", i%7))
	}
	// A re-publish inside the duplicate window is dropped by the server.
	publish(t, js, name, "id-0003", "k3")
	// A message without outbox-id: the ID comes from Nats-Msg-Id.
	m := nats.NewMsg(name)
	_, err = js.PublishMsg(ctx, m, jetstream.WithMsgID("only-msg-id"))
	require.NoError(t, err)

	ds, err = natsstream.Consume(ctx, testenv.NATSURL(), name)
	require.NoError(t, err)
	require.Len(t, ds, 2501, "more than one fetch batch, the duplicate dropped")
	for i, d := range ds[:2500] {
		require.Equal(t, name, d.Topic)
		require.Equal(t, int32(0), d.Partition)
		require.Equal(t, int64(i+1), d.Offset, "stream sequence")
		require.Equal(t, fmt.Sprintf("id-%04d", i), d.ID)
		require.Equal(t, fmt.Sprintf("k%d", i%7), d.Key)
		require.WithinDuration(t, before, d.At, time.Minute)
		if i > 0 {
			require.False(t, d.At.Before(ds[i-1].At), "stored times in stream order")
		}
	}
	require.Equal(t, "only-msg-id", ds[2500].ID)
	// The tap saw every publish, the one the stream dropped included.
	require.Eventually(t, func() bool {
		n, re := tap.Published()
		return n == 2502 && re == 1
	}, 20*time.Second, 20*time.Millisecond)

	// Messages published after the call are not waited for; a second call
	// sees them.
	publish(t, js, name, "late", "k0")
	ds, err = natsstream.Consume(ctx, testenv.NATSURL(), name)
	require.NoError(t, err)
	require.Len(t, ds, 2502)
}

func TestConsumeOfAMissingStreamFailsWhenCtxEnds(t *testing.T) {
	t.Parallel()
	name, _ := stream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := natsstream.Consume(ctx, testenv.NATSURL(), name+"-missing")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "stream not found")
}

// TestCheckerCatchesALostAndAReorderedMessage is the negative check for
// this broker: a stream missing a committed entry, and holding two of a
// key's entries swapped, fails the check.
func TestCheckerCatchesALostAndAReorderedMessage(t *testing.T) {
	t.Parallel()
	name, js := stream(t)
	// e2 never published; e5 before e4.
	for _, id := range checktest.Published {
		publish(t, js, name, id, checktest.Key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ds, err := natsstream.Consume(ctx, testenv.NATSURL(), name)
	require.NoError(t, err)
	checktest.RequireCaught(t, ds)
}
