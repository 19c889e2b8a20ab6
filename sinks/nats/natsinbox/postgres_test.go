package natsinbox_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/testenv"
	natssink "github.com/outboxrelay/outbox/sinks/nats"
	"github.com/outboxrelay/outbox/sinks/nats/natsinbox"
)

// postgres connects to the real PostgreSQL (testenv.PostgresURL), or skips
// the test (fails it under OUTBOX_REQUIRE_SERVICES=1), and makes a schema
// of the test's own holding the inbox's tables and an effects table,
// dropped when the test ends.
func postgres(t *testing.T) (*pgxpool.Pool, pginbox.Options, string) {
	t.Helper()
	ctx := ctxT(t)
	pool, err := pgxpool.New(ctx, testenv.PostgresURL())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	t.Cleanup(pool.Close)
	opts := pginbox.Options{Schema: "natsinbox_" + suffix()}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{opts.Schema}.Sanitize()+" CASCADE")
	})
	require.NoError(t, pginbox.Migrate(ctx, pool, opts))
	effects := pgx.Identifier{opts.Schema, "effects"}.Sanitize()
	_, err = pool.Exec(ctx, "CREATE TABLE "+effects+" (n bigserial PRIMARY KEY, id text NOT NULL, key text NOT NULL, seq bigint NOT NULL)")
	require.NoError(t, err)
	return pool, opts, effects
}

// closeAfter is the PostgreSQL store, closing a NATS connection right
// after its n-th committed transaction: the Acks that follow that commit
// are lost.
type closeAfter struct {
	inbox.Store[pgx.Tx]
	commits atomic.Int32
	n       int32
	nc      *nats.Conn
}

func (s *closeAfter) InTx(ctx context.Context, fn func(context.Context, pgx.Tx) error) error {
	err := s.Store.InTx(ctx, fn)
	if err == nil && s.commits.Add(1) == s.n {
		s.nc.Close()
	}
	return err
}

// End to end with PostgreSQL: entries published by natssink, consumed in
// batches whose effects are rows written in the inbox's transaction;
// handler failures retried in place; a consumer whose connection dies
// between a commit and its Acks, and a second one that takes over and gets
// the unacknowledged messages again. Each entry's row is written once,
// though the stream delivered more messages than it holds. (Key order
// does not hold across the first consumer's death: the server keeps
// sending to its pull requests until they expire, and those messages come
// back after AckWait, behind later ones; the test logs how many keys saw
// that.)
func TestWithPostgresEachEntryOnceThroughALostConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pool, opts, effects := postgres(t)
	const keys, perKey, batch = 5, 40, 8
	var all []outbox.Entry
	for s := 1; s <= perKey; s++ {
		for k := range keys {
			all = append(all, entry(e.subject+".orders", "key-"+strconv.Itoa(k), s))
		}
	}
	sink, err := natssink.Dial(e.url, natssink.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })
	for i, err := range sink.Publish(ctxT(t), all) {
		require.NoError(t, err, "entry %d", i)
	}
	durable := "c" + suffix()
	cons := e.consumer(e.js, func(c *jetstream.ConsumerConfig) {
		c.Durable = durable
		c.AckWait = time.Second
	})

	store, err := pginbox.New(pool, opts)
	require.NoError(t, err)
	var (
		mu     sync.Mutex
		failed = map[string]bool{}
	)
	h := func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		mu.Lock()
		fail := !failed[m.ID] && m.Seq%7 == 3
		failed[m.ID] = true
		mu.Unlock()
		if fail {
			return errors.New("the downstream service said no, once")
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+effects+" (id, key, seq) VALUES ($1, $2, $3)", m.ID, m.Key, m.Seq)
		return err
	}

	nc1, js1 := e.connect()
	cons1, err := js1.Consumer(ctxT(t), e.stream, durable)
	require.NoError(t, err)
	ib1, err := inbox.New[pgx.Tx](&closeAfter{Store: store, n: 5, nc: nc1}, inbox.Options{})
	require.NoError(t, err)
	c1, err := natsinbox.NewConsumer(ib1, h, cons1, natsinbox.Options{MaxBatch: batch, NakDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	require.Error(t, c1.Run(ctxT(t)), "the first consumer's connection closed")

	_, js2 := e.connect()
	cons2, err := js2.Consumer(ctxT(t), e.stream, durable)
	require.NoError(t, err)
	ib2, err := inbox.New(store, inbox.Options{})
	require.NoError(t, err)
	c2, err := natsinbox.NewConsumer(ib2, h, cons2, natsinbox.Options{MaxBatch: batch, NakDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	stop := runConsumer(t, c2)
	eventually(t, "every message applied and acknowledged", func() bool {
		ci := info(t, cons)
		return ci.NumAckPending == 0 && ci.NumPending == 0
	})
	require.NoError(t, stop())

	ci := info(t, cons)
	t.Logf("stream messages %d, deliveries %d", ci.Delivered.Stream, ci.Delivered.Consumer)
	assert.Greater(t, ci.Delivered.Consumer, ci.Delivered.Stream, "some messages were delivered twice")
	rows, err := pool.Query(ctxT(t), "SELECT id, key, seq FROM "+effects+" ORDER BY n")
	require.NoError(t, err)
	var got []effect
	for rows.Next() {
		var f effect
		require.NoError(t, rows.Scan(&f.ID, &f.Key, &f.Seq))
		got = append(got, f)
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, len(all), "each entry's row once")
	seen := map[string]bool{}
	last := map[string]int64{}
	late := map[string]bool{}
	for _, f := range got {
		require.False(t, seen[f.ID], "entry %s applied twice", f.ID)
		seen[f.ID] = true
		if f.Seq != last[f.Key]+1 {
			late[f.Key] = true
		}
		last[f.Key] = max(last[f.Key], f.Seq)
	}
	t.Logf("%d of %d keys saw a message after a later one of theirs", len(late), keys)
}
