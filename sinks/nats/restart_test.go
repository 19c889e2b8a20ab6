package natssink_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	"github.com/outboxrelay/outbox/internal/brokerproc"
	"github.com/outboxrelay/outbox/internal/testenv"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
)

// TestRelayDrainThroughServerRestarts: a relay drains 20,000 entries over
// 200 keys (memory backend) into a private nats-server with file storage,
// which is SIGKILLed and started again on the same port and store twice
// during the drain (at about a third and two thirds of it). Read back, the
// stream holds every entry (nothing lost), each key's entries in append
// order, and no entry twice: the re-publishes of entries whose
// acknowledgement the restart cut off are dropped by the stream's
// duplicate window (2m, longer than the whole drain).
func TestRelayDrainThroughServerRestarts(t *testing.T) {
	t.Parallel()
	const keys, perKey = 200, 100
	const total = keys * perKey
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, st, sink := privateServer(ctx, t, "RESTART", "restart.>")

	b := memory.New(memory.Options{Partitions: 4})
	defer b.Close()
	es := make([]outbox.Entry, 0, total)
	for s := range perKey {
		for k := range keys {
			es = append(es, outbox.Entry{
				ID: fmt.Sprintf("k%03d-%03d", k, s), Topic: "restart.events", Key: fmt.Sprintf("key-%03d", k),
				Payload: []byte(strconv.Itoa(s)),
			})
		}
	}
	tx := b.Begin()
	require.NoError(t, b.AppendInTx(ctx, tx, es...))
	require.NoError(t, tx.Commit())

	relay, err := outbox.NewRelay(b, sink, outbox.RelayOptions{
		PollInterval: 20 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, relay.Start(ctx))
	defer func() { _ = relay.Stop(context.Background()) }()

	// sentSoFar is how many entries the backend no longer holds pending.
	sentSoFar := func() int {
		s, err := b.Stats(ctx)
		require.NoError(t, err)
		require.Zero(t, s.Parked, "no entry parks")
		return total - int(s.Pending)
	}
	for _, at := range []int{total / 3, 2 * total / 3} {
		for sentSoFar() < at {
			require.NoError(t, ctx.Err(), "the drain did not reach %d entries", at)
			time.Sleep(2 * time.Millisecond)
		}
		srv.Kill()
		t.Logf("nats-server SIGKILLed with %d of %d entries sent, after %v", sentSoFar(), total, time.Since(start).Round(time.Millisecond))
		require.NoError(t, srv.Start(ctx))
		restarted, from := time.Now(), sentSoFar()
		for sentSoFar() == from {
			require.NoError(t, ctx.Err(), "nothing was sent after the restart")
			time.Sleep(2 * time.Millisecond)
		}
		t.Logf("nats-server started again; the relay sent again %v later", time.Since(restarted).Round(time.Millisecond))
	}
	for sentSoFar() < total {
		require.NoError(t, ctx.Err(), "the drain did not finish: %+v", relay.Stats())
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)

	msgs := consumeAll(t, st)
	stored := map[string]int{}  // copies per entry ID
	lastSeq := map[string]int{} // per key, the latest sequence number read
	dups, outOfOrder := 0, 0
	for _, m := range msgs {
		id := m.Headers().Get(natssink.DefaultIDHeader)
		require.Equal(t, id, m.Headers().Get(jetstream.MsgIDHeader))
		if stored[id]++; stored[id] > 1 {
			dups++
			continue
		}
		key := m.Headers().Get(natssink.DefaultKeyHeader)
		seq, err := strconv.Atoi(string(m.Data()))
		require.NoError(t, err)
		if last, ok := lastSeq[key]; ok && seq != last+1 {
			outOfOrder++
			t.Errorf("key %s: entry %d after entry %d", key, seq, last)
		} else if !ok && seq != 0 {
			outOfOrder++
			t.Errorf("key %s starts with entry %d", key, seq)
		}
		lastSeq[key] = seq
	}
	lost := 0
	for _, e := range es {
		if stored[e.ID] == 0 {
			lost++
		}
	}
	stats := relay.Stats()
	t.Logf("drain of %d entries over %d keys through 2 SIGKILL restarts: %v; stream holds %d messages: %d lost, %d duplicates, %d out of order; relay %+v",
		total, keys, took.Round(time.Millisecond), len(msgs), lost, dups, outOfOrder, stats)
	require.Zero(t, lost, "entries lost")
	require.Zero(t, dups, "duplicates inside the duplicate window")
	require.Len(t, msgs, total)
}

// consumeAll reads every message of st with an ordered consumer, failing
// the test if they cannot be read within 60s.
func consumeAll(t testing.TB, st jetstream.Stream) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	require.NoError(t, err)
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	out := make([]jetstream.Msg, 0, info.State.Msgs)
	for uint64(len(out)) < info.State.Msgs {
		require.NoError(t, ctx.Err(), "read %d of %d messages", len(out), info.State.Msgs)
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		require.NoError(t, err)
		for m := range batch.Messages() {
			out = append(out, m)
		}
		require.NoError(t, batch.Error())
	}
	return out
}

// TestDuplicateWindowSurvivesAServerRestart: an entry published, then
// published again after nats-server was SIGKILLed and started again on
// its store, is acknowledged and stored once: the stream rebuilds its
// duplicate window from the stored messages.
func TestDuplicateWindowSurvivesAServerRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, st, sink := privateServer(ctx, t, "WINDOW", "window")
	e := outbox.Entry{ID: "once", Topic: "window", Key: "k", Payload: []byte("x")}
	require.NoError(t, publishOne(t, sink, e))
	srv.Kill()
	require.NoError(t, srv.Start(ctx))
	for !sink.Conn().IsConnected() {
		require.NoError(t, ctx.Err(), "the sink did not reconnect")
		time.Sleep(5 * time.Millisecond)
	}
	require.NoError(t, publishOne(t, sink, e))
	require.NoError(t, publishOne(t, sink, outbox.Entry{ID: "after", Topic: "window", Key: "k"}))
	require.Equal(t, []string{"once", "after"}, ids(readAll(t, st)))
}

// privateServer starts a private nats-server (brokerproc, file storage in
// a temporary directory), killed when the test ends, with a stream name
// capturing subject, and a sink Dial built for it (closed when the test
// ends). It skips t (fails it under OUTBOX_REQUIRE_SERVICES=1) when
// nats-server is not installed.
func privateServer(ctx context.Context, t *testing.T, name, subject string) (*brokerproc.NATS, jetstream.Stream, *natssink.Sink) {
	t.Helper()
	if _, err := brokerproc.NATSBinary(); err != nil {
		testenv.Unavailable(t, "nats-server", "OUTBOX_NATS_SERVER", err)
	}
	srv, err := brokerproc.StartNATS(ctx, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(srv.Kill)
	admin := connect(t, srv.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	st := newStream(t, admin, name, []string{subject})
	sink, err := natssink.Dial(srv.URL(), natssink.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })
	return srv, st, sink
}
