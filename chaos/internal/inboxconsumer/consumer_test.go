package inboxconsumer

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/chaos/internal/exactlyonce"
	"github.com/outboxrelay/outbox/internal/mysqlurl"
	"github.com/outboxrelay/outbox/internal/testenv"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

var schemas atomic.Int64

// newSchema makes a fresh schema with the effect and inbox tables in the
// test PostgreSQL, dropped after the test.
func newSchema(t *testing.T) (pgURL, schema string, pool *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pgURL = testenv.PostgresURL()
	pool, err := pgxpool.New(ctx, pgURL)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	schema = fmt.Sprintf("chaos_inboxconsumer_%d_%d", time.Now().UnixNano(), schemas.Add(1))
	require.NoError(t, Setup(ctx, pgURL, schema))
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	})
	return pgURL, schema, pool
}

const testTopic = "t"

// produce writes one record per id (key k, the key's number in the
// outbox-key-seq header), in order, to partition p of the topic.
func produce(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

func record(key string, seq int) *kgo.Record {
	return &kgo.Record{Topic: testTopic, Key: []byte(key), Value: []byte("v"), Headers: []kgo.RecordHeader{
		{Key: kafkasink.DefaultIDHeader, Value: fmt.Appendf(nil, "%s-%d", key, seq)},
		{Key: outbox.HeaderKeySeq, Value: []byte(strconv.Itoa(seq))},
	}}
}

// entries are keys k0..k{keys-1} with n entries each, as committed.
func entries(keys, n int) []exactlyonce.Entry {
	var es []exactlyonce.Entry
	for k := range keys {
		for s := 1; s <= n; s++ {
			es = append(es, exactlyonce.Entry{ID: fmt.Sprintf("k%d-%d", k, s), Key: fmt.Sprintf("k%d", k), Seq: int64(s)})
		}
	}
	return es
}

// records are entries(keys, n) as records, each key's in order, every
// third one published twice in a row (a relay's re-publish).
func records(keys, n int) (recs []*kgo.Record, dups int) {
	for s := 1; s <= n; s++ {
		for k := range keys {
			r := record(fmt.Sprintf("k%d", k), s)
			recs = append(recs, r)
			if s%3 == 0 {
				recs = append(recs, record(fmt.Sprintf("k%d", k), s))
				dups++
			}
		}
	}
	return recs, dups
}

// runConsumer runs Main with args until the effect table holds rows
// rows, then stops it and returns the effects.
func runConsumer(t *testing.T, pgURL, schema string, rows int, args ...string) []exactlyonce.Effect {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	args = append([]string{"-store", pgURL}, args...)
	if schema != "" {
		args = append(args, "-schema", schema)
	}
	go func() { done <- Main(ctx, args) }()
	// A watchdog, not a timing assertion: a consumer that never gets
	// there fails the test instead of hanging it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, n, err := CountEffects(context.Background(), pgURL, schema)
		require.NoError(t, err)
		if n >= rows {
			break
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("the consumer returned (%v) with %d of %d effect rows", err, n, rows)
		case <-time.After(50 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "watchdog: %d of %d effect rows after a minute", n, rows)
	}
	cancel()
	require.NoError(t, <-done)
	effects, err := ReadEffects(context.Background(), pgURL, schema)
	require.NoError(t, err)
	return effects
}

func newCluster(t *testing.T) (brokers string, producer *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, testTopic))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	brokers = strings.Join(c.ListenAddrs(), ",")
	producer, err = kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(testTopic))
	require.NoError(t, err)
	t.Cleanup(producer.Close)
	return brokers, producer
}

// With the inbox, every entry is applied once though a third of them are
// on the topic twice, and a second consumer of the group, started after
// the first stopped, resumes from the offsets stored with the effects: it
// applies only what was produced since.
func TestInboxModeAppliesEachEntryOnceAndResumesFromStoredOffsets(t *testing.T) {
	t.Parallel()
	pgURL, schema, pool := newSchema(t)
	brokers, producer := newCluster(t)
	recs, dups := records(5, 12)
	produce(t, producer, recs...)
	args := []string{"-kafka-brokers", brokers, "-topic", testTopic, "-group", "g", "-mode", ModeInbox, "-batch", "7"}
	effects := runConsumer(t, pgURL, schema, 5*12, args...)
	r := exactlyonce.Check(entries(5, 12), effects)
	require.True(t, r.OK(), "%v", r)
	require.Positive(t, dups)
	// The partitions' next offsets are stored with the effects: together
	// they pass every record produced (one offset each).
	st, err := pginbox.New(pool, inboxOptions(schema))
	require.NoError(t, err)
	stored, err := st.Offsets(context.Background(), "g", testTopic)
	require.NoError(t, err)
	var next int64
	for _, n := range stored {
		next += n
	}
	require.Equal(t, int64(len(recs)), next, "stored offsets %v", stored)

	more, _ := records(5, 18)
	produce(t, producer, more[len(recs):]...) // numbers 13..18
	effects = runConsumer(t, pgURL, schema, 5*18, args...)
	r = exactlyonce.Check(entries(5, 18), effects)
	require.True(t, r.OK(), "%v", r)
	require.Len(t, effects, 5*18)
}

// Without the inbox (the negative control's mode), every record is
// applied: each duplicate on the topic is a duplicate effect, which the
// check reports.
func TestPlainModeAppliesDuplicates(t *testing.T) {
	t.Parallel()
	pgURL, schema, _ := newSchema(t)
	brokers, producer := newCluster(t)
	recs, dups := records(4, 9)
	produce(t, producer, recs...)
	effects := runConsumer(t, pgURL, schema, len(recs),
		"-kafka-brokers", brokers, "-topic", testTopic, "-group", "g", "-mode", ModePlain)
	r := exactlyonce.Check(entries(4, 9), effects)
	require.False(t, r.OK())
	require.Equal(t, dups, r.Duplicates)
	require.Empty(t, r.Missing)
	require.Empty(t, r.OrderViolations)
}

func TestFlags(t *testing.T) {
	t.Parallel()
	var sb strings.Builder
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-store", "x", "-schema", "s"}, "-kafka-brokers, -topic and -group are required"},
		{[]string{"-kafka-brokers", "b", "-topic", "t", "-group", "g"}, "-store is required, and -schema"},
		{[]string{"-kafka-brokers", "b", "-topic", "t", "-group", "g", "-store", "x", "-schema", "s", "-mode", "x"}, `-mode "x"`},
		{[]string{"-kafka-brokers", "b", "-topic", "t", "-group", "g", "-store", "x", "-schema", "s", "-batch", "0"}, "-batch 0"},
		{[]string{"extra"}, "unexpected arguments"},
	} {
		_, err := parseFlags(tc.args, &sb)
		require.ErrorContains(t, err, tc.want, "%q", tc.args)
		require.True(t, strings.HasPrefix(err.Error(), "inboxconsumer: "), "%v", err)
	}
	c, err := parseFlags([]string{"-kafka-brokers", "b", "-topic", "t", "-group", "g", "-store", "x", "-schema", "s"}, &sb)
	require.NoError(t, err)
	require.Equal(t, ModeInbox, c.mode)
	require.Equal(t, 50, c.batch)
}

// newMySQLDatabase makes a fresh database in the test MySQL with the
// effect and inbox tables, dropped after the test, and returns its
// mysql:// URL.
func newMySQLDatabase(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := sql.Open("mysql", testenv.MySQLDSN(""))
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.PingContext(ctx); err != nil {
		testenv.Unavailable(t, "MySQL", "OUTBOX_MYSQL_URL", err)
	}
	db := fmt.Sprintf("chaos_inboxconsumer_%d_%d", time.Now().UnixNano(), schemas.Add(1))
	_, err = admin.ExecContext(ctx, "CREATE DATABASE `"+db+"`")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+db+"`") })
	store, err := mysqlurl.WithDatabase(testenv.MySQLURL(), db, "")
	require.NoError(t, err)
	require.NoError(t, Setup(ctx, store, ""))
	return store
}

// The same in MySQL: with the inbox every entry once, without it every
// duplicate on the topic applied twice.
func TestMySQLModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{ModeInbox, ModePlain} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			store := newMySQLDatabase(t)
			brokers, producer := newCluster(t)
			recs, dups := records(3, 9)
			produce(t, producer, recs...)
			rows := 3 * 9
			if mode == ModePlain {
				rows = len(recs)
			}
			effects := runConsumer(t, store, "", rows,
				"-kafka-brokers", brokers, "-topic", testTopic, "-group", "g", "-mode", mode)
			r := exactlyonce.Check(entries(3, 9), effects)
			require.Empty(t, r.Missing)
			require.Empty(t, r.OrderViolations)
			if mode == ModeInbox {
				require.True(t, r.OK(), "%v", r)
			} else {
				require.Equal(t, dups, r.Duplicates)
			}
		})
	}
}

// newRedisStore returns a redis:// store URL with a prefix of the test's
// own in the test Redis, whose keys are deleted after the test.
func newRedisStore(t *testing.T) string {
	t.Helper()
	opt, err := redis.ParseURL(testenv.RedisURL())
	require.NoError(t, err)
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, "Redis", "OUTBOX_REDIS_URL", err)
	}
	tag := fmt.Sprintf("chaos-inboxconsumer-%d-%d", time.Now().UnixNano(), schemas.Add(1))
	t.Cleanup(func() {
		keys, _ := c.Keys(context.Background(), "{"+tag+"}*").Result()
		if len(keys) > 0 {
			_ = c.Del(context.Background(), keys...).Err()
		}
	})
	u, err := url.Parse(testenv.RedisURL())
	require.NoError(t, err)
	q := u.Query()
	q.Set("prefix", "{"+tag+"}")
	u.RawQuery = q.Encode()
	require.NoError(t, Setup(ctx, u.String(), ""))
	return u.String()
}

// The same in Redis, the effect queued in the inbox's MULTI.
func TestRedisModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{ModeInbox, ModePlain} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			store := newRedisStore(t)
			brokers, producer := newCluster(t)
			recs, dups := records(3, 9)
			produce(t, producer, recs...)
			rows := 3 * 9
			if mode == ModePlain {
				rows = len(recs)
			}
			effects := runConsumer(t, store, "", rows,
				"-kafka-brokers", brokers, "-topic", testTopic, "-group", "g", "-mode", mode)
			r := exactlyonce.Check(entries(3, 9), effects)
			require.Empty(t, r.Missing)
			require.Empty(t, r.OrderViolations)
			if mode == ModeInbox {
				require.True(t, r.OK(), "%v", r)
			} else {
				require.Equal(t, dups, r.Duplicates)
			}
		})
	}
}
