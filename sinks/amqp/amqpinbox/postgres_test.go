package amqpinbox_test

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
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/testenv"
	"github.com/outboxrelay/outbox/sinks/amqp/amqpinbox"
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
	opts := pginbox.Options{Schema: "amqpinbox_" + strconv.FormatUint(uint64(time.Now().UnixNano()), 36)}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{opts.Schema}.Sanitize()+" CASCADE")
	})
	require.NoError(t, pginbox.Migrate(ctx, pool, opts))
	effects := pgx.Identifier{opts.Schema, "effects"}.Sanitize()
	_, err = pool.Exec(ctx, "CREATE TABLE "+effects+" (n bigserial PRIMARY KEY, id text NOT NULL, key text NOT NULL, seq bigint NOT NULL)")
	require.NoError(t, err)
	return pool, opts, effects
}

// closeAfter is the PostgreSQL store, closing an AMQP channel right after
// its n-th committed transaction: the ack that follows that commit is
// lost.
type closeAfter struct {
	inbox.Store[pgx.Tx]
	commits atomic.Int32
	n       int32
	ch      *amqp.Channel
}

func (s *closeAfter) InTx(ctx context.Context, fn func(context.Context, pgx.Tx) error) error {
	err := s.Store.InTx(ctx, fn)
	if err == nil && s.commits.Add(1) == s.n {
		_ = s.ch.Close()
	}
	return err
}

// End to end with PostgreSQL: entries published by amqpsink to a classic
// queue, consumed in batches whose effects are rows written in the inbox's
// transaction; handler failures, some retried in place and some returned
// to the queue; a consumer whose channel closes between a commit and its
// ack, and a second one that takes over. Each entry's row is written
// once, and each key's rows in sequence order: the classic queue puts
// returned messages back at their place.
func TestWithPostgresEachEntryOnceInKeyOrder(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nil)
	pool, opts, effects := postgres(t)
	const keys, perKey, batch = 5, 40, 8
	var all []outbox.Entry
	for s := 1; s <= perKey; s++ {
		for k := range keys {
			all = append(all, entry(tp.exchange, "key-"+strconv.Itoa(k), s))
		}
	}
	for i, err := range dialSink(t, tp.url).Publish(ctxT(t), all) {
		require.NoError(t, err, "entry %d", i)
	}
	store, err := pginbox.New(pool, opts)
	require.NoError(t, err)
	var (
		mu       sync.Mutex
		failures = map[string]int{}
		redelivs int
	)
	h := func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		mu.Lock()
		n := failures[m.ID]
		failures[m.ID]++
		if m.Data.(amqp.Delivery).Redelivered {
			redelivs++
		}
		mu.Unlock()
		// Seq 3, 10, 17, ... fail once (retried in place); seq 5, 12,
		// ... fail twice, past Attempts 2 (returned to the queue).
		if (m.Seq%7 == 3 && n < 1) || (m.Seq%7 == 5 && n < 2) {
			return errors.New("the downstream service said no")
		}
		_, err := tx.Exec(ctx, "INSERT INTO "+effects+" (id, key, seq) VALUES ($1, $2, $3)", m.ID, m.Key, m.Seq)
		return err
	}
	copts := amqpinbox.Options{MaxBatch: batch, Attempts: 2, RetryDelay: 10 * time.Millisecond}

	_, ch1 := tp.channel()
	ib1, err := inbox.New[pgx.Tx](&closeAfter{Store: store, n: 5, ch: ch1}, inbox.Options{})
	require.NoError(t, err)
	c1, err := amqpinbox.NewConsumer(ib1, h, ch1, tp.queue, copts)
	require.NoError(t, err)
	require.ErrorIs(t, c1.Run(ctxT(t)), amqp.ErrClosed, "the first consumer's channel closed")

	_, ch2 := tp.channel()
	ib2, err := inbox.New(store, inbox.Options{})
	require.NoError(t, err)
	c2, err := amqpinbox.NewConsumer(ib2, h, ch2, tp.queue, copts)
	require.NoError(t, err)
	stop, _ := runConsumer(t, c2)
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctxT(t), "SELECT count(*) FROM "+effects).Scan(&n))
		return n
	}
	deadline := time.Now().Add(time.Minute)
	for count() < len(all) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	// A sentinel behind everything: once applied, every redelivery
	// before it was handled.
	tp.publish("sentinel", amqp.Publishing{MessageId: "sentinel", Headers: amqp.Table{}})
	for count() < len(all)+1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, stop())

	rows, err := pool.Query(ctxT(t), "SELECT id, key, seq FROM "+effects+" WHERE id <> 'sentinel' ORDER BY n")
	require.NoError(t, err)
	var got []effect
	for rows.Next() {
		var f effect
		require.NoError(t, rows.Scan(&f.ID, &f.Key, &f.Seq))
		got = append(got, f)
	}
	require.NoError(t, rows.Err())
	t.Logf("%d entries, %d redeliveries handed to the handler", len(all), redelivs)
	require.Positive(t, redelivs, "some messages were delivered again")
	checkOnceInKeyOrder(t, got, all)
	require.Zero(t, tp.ready(tp.queue))
}
