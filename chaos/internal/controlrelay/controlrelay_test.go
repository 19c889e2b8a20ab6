package controlrelay

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	"github.com/outboxrelay/outbox/chaos/history"
	"github.com/outboxrelay/outbox/internal/testenv"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

const testTopic = "chaos"

// testOutbox is an outbox of its own for one test.
type testOutbox struct {
	partitions int
	args       []string // -store and -schema or -prefix
	append     func(ctx context.Context, entries []outbox.Entry) error
	stats      func(ctx context.Context) (outbox.Stats, error)
}

func randomName(t *testing.T) string {
	t.Helper()
	var b [6]byte
	_, err := rand.Read(b[:])
	require.NoError(t, err)
	return hex.EncodeToString(b[:])
}

func postgresOutbox(t *testing.T, partitions int) testOutbox {
	t.Helper()
	ctx := context.Background()
	url := testenv.PostgresURL()
	pool, err := pgxpool.New(ctx, url)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = pool.Ping(pctx)
		cancel()
		if err != nil {
			pool.Close()
		}
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	t.Cleanup(pool.Close)
	schema := "controlrelay_" + randomName(t)
	opts := pgoutbox.Options{Schema: schema, Partitions: partitions, NoNotify: true}
	require.NoError(t, pgoutbox.Migrate(ctx, pool, opts))
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	b, err := pgoutbox.New(ctx, pool, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return testOutbox{
		partitions: partitions,
		args:       []string{"-store", url, "-schema", schema},
		append: func(ctx context.Context, entries []outbox.Entry) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, entries...) })
		},
		stats: b.Stats,
	}
}

func redisOutbox(t *testing.T, partitions int) testOutbox {
	t.Helper()
	ctx := context.Background()
	url := testenv.RedisURL()
	opt, err := redis.ParseURL(url)
	require.NoError(t, err)
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = client.Ping(pctx).Err()
	cancel()
	if err != nil {
		testenv.Unavailable(t, "Redis", "OUTBOX_REDIS_URL", err)
	}
	tag := "controlrelay-" + randomName(t)
	prefix := "{" + tag + "}"
	t.Cleanup(func() {
		ctx := context.Background()
		var keys []string
		it := client.Scan(ctx, 0, "{"+tag+"*", 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		if len(keys) > 0 {
			_ = client.Del(ctx, keys...).Err()
		}
	})
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix, Partitions: partitions, NoNotify: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	return testOutbox{
		partitions: partitions,
		args:       []string{"-store", url, "-prefix", prefix},
		append:     func(ctx context.Context, entries []outbox.Entry) error { return b.Append(ctx, entries...) },
		stats:      b.Stats,
	}
}

// syncBuffer is a bytes.Buffer for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// load appends a test's entries to ob, recording each in h once committed.
type load func(ctx context.Context, t *testing.T, ob testOutbox, h *history.History)

// bulk appends 20 keys of 100 entries each, 200 entries a transaction,
// seq-major so that every stretch of a partition mixes its keys: with 4
// partitions a batch of 50 holds about 10 entries of each of its
// partition's keys.
func bulk(ctx context.Context, t *testing.T, ob testOutbox, h *history.History) {
	const keys, perKey = 20, 100
	name := randomName(t)
	var chunk []history.Entry
	var entries []outbox.Entry
	for seq := 1; seq <= perKey; seq++ {
		for k := range keys {
			key := fmt.Sprintf("%s-k%02d", name, k)
			entries = append(entries, outbox.Entry{ID: fmt.Sprintf("%s-%03d", key, seq), Topic: testTopic, Key: key, Payload: []byte("x")})
			p := int32(outbox.PartitionOf(key, ob.partitions))
			chunk = append(chunk, history.Entry{ID: entries[len(entries)-1].ID, Key: key, Seq: int64(seq), Partition: &p})
			if len(entries) == 200 || seq == perKey && k == keys-1 {
				require.NoError(t, ob.append(ctx, entries))
				for _, e := range chunk {
					e.At = time.Now()
					h.Append(e)
				}
				entries, chunk = entries[:0], chunk[:0]
			}
		}
	}
}

// harnessRate appends as the chaos harness's short run does, while the
// relay runs: 2 appenders of 40 keys each (keys round robin, one entry a
// transaction) at 60 transactions a second each, for 3 seconds. A key
// gets an entry every 0.67s.
func harnessRate(ctx context.Context, t *testing.T, ob testOutbox, h *history.History) {
	const appenders, keys, rate, lasting = 2, 40, 60, 3 * time.Second
	var wg sync.WaitGroup
	for a := range appenders {
		name := randomName(t)
		wg.Go(func() {
			tick := time.NewTicker(time.Second / rate)
			defer tick.Stop()
			seqs := make([]int64, keys)
			for i, end := 0, time.Now().Add(lasting); time.Now().Before(end); i++ {
				<-tick.C
				k := i % keys
				seqs[k]++
				key := fmt.Sprintf("%s-a%d-k%02d", name, a, k)
				e := outbox.Entry{ID: fmt.Sprintf("%s-%03d", key, seqs[k]), Topic: testTopic, Key: key, Payload: []byte("x")}
				if err := ob.append(ctx, []outbox.Entry{e}); err != nil {
					t.Errorf("append %s: %v", e.ID, err)
					return
				}
				p := int32(outbox.PartitionOf(key, ob.partitions))
				h.Append(history.Entry{ID: e.ID, Key: key, Seq: seqs[k], Partition: &p, At: time.Now()})
			}
		})
	}
	wg.Wait()
}

// runControl runs the control relay with args over ob and a kfake broker
// while load appends (before the relay starts unless live), waits until
// the outbox is drained, stops the relay, reads back every record of the
// broker into the history, and returns the history's report and what the
// run did.
func runControl(t *testing.T, ob testOutbox, ld load, live bool, args ...string) (history.Report, result) {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(ob.partitions), testTopic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)

	var h history.History
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !live {
		ld(ctx, t, ob, &h)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var stderr syncBuffer
	type outcome struct {
		res result
		err error
	}
	done := make(chan outcome, 1)
	all := append(append([]string{"-kafka-brokers", strings.Join(cluster.ListenAddrs(), ",")}, ob.args...), args...)
	go func() {
		res, err := run(runCtx, all, &stderr)
		done <- outcome{res, err}
	}()
	if live {
		ld(ctx, t, ob, &h)
	}

	// Drained: nothing pending nor parked.
	for {
		st, err := ob.stats(ctx)
		require.NoError(t, err)
		if st.Pending == 0 {
			require.Zero(t, st.Parked, "entries parked; log:\n%s", stderr.String())
			break
		}
		select {
		case o := <-done:
			t.Fatalf("the control relay returned before draining (%d pending): %v; log:\n%s", st.Pending, o.err, stderr.String())
		case <-ctx.Done():
			t.Fatalf("not drained in time (%d pending); log:\n%s", st.Pending, stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()
	var o outcome
	select {
	case o = <-done:
	case <-ctx.Done():
		t.Fatalf("the control relay did not stop; log:\n%s", stderr.String())
	}
	require.NoError(t, o.err, "log:\n%s", stderr.String())
	require.Contains(t, stderr.String(), "controlrelay: ", "it logs what it did at exit")

	// Every record the broker holds: the outbox is drained, so every
	// acknowledged record is there.
	want := h.Check().Appended - int(o.res.dropped)
	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(testTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer consumer.Close()
	got := 0
	for got < want {
		fs := consumer.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d records", got, want)
		require.NoError(t, fs.Err0())
		fs.EachRecord(func(r *kgo.Record) {
			got++
			h.Delivered(history.Delivery{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
				ID: kafkasink.EntryID(r), Key: string(r.Key), At: r.Timestamp})
		})
	}
	return h.Check(), o.res
}

func TestControlsFailTheChecker(t *testing.T) {
	t.Parallel()
	for _, backend := range []struct {
		name string
		open func(*testing.T, int) testOutbox
	}{{"Postgres", postgresOutbox}, {"Redis", redisOutbox}} {
		t.Run(backend.name, func(t *testing.T) {
			t.Parallel()
			t.Run("LossyLosesEntriesInOrder", func(t *testing.T) {
				t.Parallel()
				// 1% rather than the default 0.1%: 2,000 entries would
				// lose none 13% of the time at 0.1%.
				rep, res := runControl(t, backend.open(t, 4), bulk, false, "-mode", "lossy", "-drop", "0.01", "-seed", "42")
				require.Positive(t, res.dropped)
				require.Len(t, rep.Lost, int(res.dropped), "every dropped entry, and nothing else, is lost")
				require.Empty(t, rep.OrderViolations, "dropping reorders nothing")
				require.Zero(t, rep.Duplicates)
				require.Empty(t, rep.Unexpected)
				t.Logf("lossy: %d of %d dropped, %d lost", res.dropped, res.handed, len(rep.Lost))
			})
			t.Run("UnorderedBreaksKeyOrderLosingNothing", func(t *testing.T) {
				t.Parallel()
				rep, res := runControl(t, backend.open(t, 4), bulk, false, "-mode", "unordered", "-seed", "42")
				requireReordered(t, rep, res)
			})
		})
	}
	// The harness's conditions: the relay runs while appenders append at
	// the short run's rate over 8 partitions, notifications on. Without
	// -gather the relay would fetch about every entry on its own and
	// shuffle nothing of a key.
	t.Run("UnorderedAtTheHarnessRate", func(t *testing.T) {
		t.Parallel()
		rep, res := runControl(t, postgresOutbox(t, 8), harnessRate, true, "-mode", "unordered")
		requireReordered(t, rep, res)
	})
}

func requireReordered(t *testing.T, rep history.Report, res result) {
	t.Helper()
	require.Positive(t, res.multiKeyCalls, "the relay gave the sink several entries of a key per call")
	require.NotEmpty(t, rep.OrderViolations)
	require.Empty(t, rep.Lost)
	require.Zero(t, rep.Duplicates)
	require.Empty(t, rep.Unexpected)
	t.Logf("unordered: %d order violations among %d entries; %d publish calls with several entries of a key", len(rep.OrderViolations), rep.Appended, res.multiKeyCalls)
}

func TestFlags(t *testing.T) {
	t.Parallel()
	base := []string{"-store", "postgres://u@127.0.0.1:1/db", "-kafka-brokers", "127.0.0.1:1"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"BadMode", append([]string{"-mode", "sideways"}, base...), `-mode "sideways" is unknown`},
		{"NoMode", base, "-mode is required"},
		{"DropOutOfRange", append([]string{"-mode", "lossy", "-drop", "1.5"}, base...), "-drop is 1.5"},
		{"NoStore", []string{"-mode", "lossy", "-kafka-brokers", "127.0.0.1:1"}, "-store is required"},
		{"NoBrokers", []string{"-mode", "lossy", "-store", "redis://127.0.0.1:1"}, "-kafka-brokers is required"},
		{"BrokerNotHostPort", append(slices.Clone(base), "-mode", "lossy", "-kafka-brokers", "nohost"), `"nohost" is not host:port`},
		{"ZeroBatch", append([]string{"-mode", "unordered", "-batch", "0"}, base...), "-batch must be positive"},
		{"ShortLease", append([]string{"-mode", "unordered", "-lease-ttl", "5s"}, base...), "-lease-ttl (5s) is too short for the landing bound of -kafka-publish-timeout"},
		{"PrefixWithPostgres", append([]string{"-mode", "unordered", "-prefix", "{x}"}, base...), "-prefix names a Redis outbox"},
		{"Arguments", append([]string{"-mode", "unordered"}, append(base, "extra")...), "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var stderr syncBuffer
			_, err := run(ctx, tc.args, &stderr)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.True(t, strings.HasPrefix(err.Error(), "controlrelay: "), err.Error())
		})
	}
	t.Run("MainNamesTheFlag", func(t *testing.T) {
		t.Parallel()
		err := Main(context.Background(), append([]string{"-mode", "sideways"}, base...))
		require.ErrorContains(t, err, "-mode")
	})
}
