package kafkainbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/internal/testenv"
	"github.com/outboxrelay/outbox/sinks/kafka/kafkainbox"
)

// The scenarios against PostgreSQL: the inbox store is pginbox, the
// effects go into a table of the same schema, in the same transaction as
// the inbox records and the offsets.
func TestConsumerPostgres(t *testing.T) {
	t.Parallel()
	t.Run("CrashBetweenStoreCommitAndKafkaCommit", func(t *testing.T) {
		t.Parallel()
		crashScenario(t, postgresHarness(t))
	})
	t.Run("RebalanceFourToTwoToFour", func(t *testing.T) {
		t.Parallel()
		rebalanceScenario(t, postgresHarness(t), 60)
	})
	t.Run("HungConsumerLosesItsPartitionsAndCommitsLate", func(t *testing.T) {
		t.Parallel()
		zombieScenario(t, postgresHarness(t))
	})
	t.Run("SQLCrashBetweenStoreCommitAndKafkaCommit", func(t *testing.T) {
		t.Parallel()
		crashScenario(t, postgresSQLHarness(t))
	})
}

var pgShared struct {
	sync.Mutex
	pool *pgxpool.Pool
	err  error
}

// pgPool is the tests' shared pool, or skips (fails under
// OUTBOX_REQUIRE_SERVICES=1) when PostgreSQL is unreachable.
func pgPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pgShared.Lock()
	defer pgShared.Unlock()
	if pgShared.pool == nil && pgShared.err == nil {
		cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
		if err != nil {
			t.Fatalf("OUTBOX_POSTGRES_URL: %v", err)
		}
		cfg.MaxConns = 24
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err == nil {
			err = p.Ping(ctx)
		}
		pgShared.pool, pgShared.err = p, err
	}
	if pgShared.err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", pgShared.err)
	}
	return pgShared.pool
}

// newSchema makes a fresh schema name, dropped with everything in it when
// t ends.
func newSchema(t testing.TB, p *pgxpool.Pool) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "kafkainbox_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := p.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping test schema %s: %v", schema, err)
		}
	})
	return schema
}

// migrateWithEffects migrates an inbox into a fresh schema, next to an
// effects table without any unique constraint (an effect applied twice
// shows as two rows), and returns the inbox's options, the table's name
// and the check of its rows.
func migrateWithEffects(t testing.TB, p *pgxpool.Pool) (pginbox.Options, string, func(testing.TB) int, func(testing.TB, []pub)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts := pginbox.Options{Schema: newSchema(t, p)}
	require.NoError(t, pginbox.Migrate(ctx, p, opts))
	table := pgx.Identifier{opts.Schema, "effects"}.Sanitize()
	_, err := p.Exec(ctx, "CREATE TABLE "+table+" (n bigserial PRIMARY KEY, id text NOT NULL, key text NOT NULL, seq bigint NOT NULL, src text NOT NULL)")
	require.NoError(t, err)
	count := func(testing.TB) int {
		var n int
		if err := p.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	check := func(t testing.TB, want []pub) {
		t.Helper()
		rows, err := p.Query(context.Background(), "SELECT id, key, seq FROM "+table+" ORDER BY n")
		require.NoError(t, err)
		got := newEffects()
		for rows.Next() {
			var m inbox.Message
			require.NoError(t, rows.Scan(&m.ID, &m.Key, &m.Seq))
			got.add(m)
		}
		require.NoError(t, rows.Err())
		got.checkOnce(t, want)
	}
	return opts, table, count, check
}

func effectArgs(m inbox.Message) []any {
	r := m.Data.(*kgo.Record)
	return []any{m.ID, m.Key, m.Seq, fmt.Sprintf("%s[%d]@%d", r.Topic, r.Partition, r.Offset)}
}

// postgresSQLHarness is postgresHarness over database/sql (pginbox.NewSQL,
// pgx's stdlib driver): the handler writes through a *sql.Tx.
func postgresSQLHarness(t testing.TB) harness[*sql.Tx] {
	t.Helper()
	p := pgPool(t)
	opts, table, count, check := migrateWithEffects(t, p)
	db := stdlib.OpenDBFromPool(p)
	t.Cleanup(func() { _ = db.Close() })
	store, err := pginbox.NewSQL(db, opts)
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Store[*sql.Tx](store), inbox.Options{Logger: quietLogger()})
	require.NoError(t, err)
	insert := "INSERT INTO " + table + " (id, key, seq, src) VALUES ($1, $2, $3, $4)"
	return harness[*sql.Tx]{
		ib: ib,
		h: func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			_, err := tx.ExecContext(ctx, insert, effectArgs(m)...)
			return err
		},
		count:     count,
		checkOnce: check,
	}
}

// postgresHarness migrates an inbox into a fresh schema (dropped when t
// ends) next to an effects table without any unique constraint, so that
// an effect applied twice shows as two rows.
func postgresHarness(t testing.TB) harness[pgx.Tx] {
	t.Helper()
	p := pgPool(t)
	opts, table, count, check := migrateWithEffects(t, p)
	store, err := pginbox.New(p, opts)
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Store[pgx.Tx](store), inbox.Options{Logger: quietLogger()})
	require.NoError(t, err)
	insert := "INSERT INTO " + table + " (id, key, seq, src) VALUES ($1, $2, $3, $4)"
	return harness[pgx.Tx]{
		ib: ib,
		h: func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
			_, err := tx.Exec(ctx, insert, effectArgs(m)...)
			return err
		},
		count:     count,
		checkOnce: check,
	}
}

// A Consumer with Options.Retention over pginbox removes the records its
// transactions wrote once they are older than the retention (backdated
// here by two hours in SQL), IDs and key numbers, and keeps the offsets.
func TestConsumerPostgresRetentionRemovesOldRecords(t *testing.T) {
	t.Parallel()
	const topic, group = "orders", "billing"
	c := newCluster(t, 2, topic)
	p := pgPool(t)
	popts, table, effects, _ := migrateWithEffects(t, p)
	store, err := pginbox.New(p, popts)
	require.NoError(t, err)
	ib, err := inbox.New(inbox.Store[pgx.Tx](store), inbox.Options{Logger: quietLogger()})
	require.NoError(t, err)
	insert := "INSERT INTO " + table + " (id, key, seq, src) VALUES ($1, $2, $3, $4)"
	apply := func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		_, err := tx.Exec(ctx, insert, effectArgs(m)...)
		return err
	}
	var want []pub
	for k := range 4 {
		want = append(want, keyed(fmt.Sprintf("k%d", k), 5, int32(k%2))...)
	}
	produce(t, newProducer(t, c), topic, want...)
	cons, err := kafkainbox.NewConsumer(ib, apply, kafkainbox.Options{
		Group: group, Topics: []string{topic}, Retention: time.Hour, JanitorInterval: 20 * time.Millisecond, Logger: quietLogger(),
	}, consumerOpts(c)...)
	require.NoError(t, err)
	stop, _ := run(t, cons)
	waitFor(t, "every record applied", func() bool { return effects(t) == len(want) })
	schema := popts.Schema
	count := func(table string) int {
		var n int
		require.NoError(t, p.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{schema, table}.Sanitize()).Scan(&n))
		return n
	}
	require.Equal(t, len(want), count("inbox"), "IDs recorded")
	require.Equal(t, 4, count("inbox_keyseq"), "key numbers set")
	_, err = p.Exec(context.Background(), "UPDATE "+pgx.Identifier{schema, "inbox"}.Sanitize()+" SET applied_at = applied_at - interval '2 hours'")
	require.NoError(t, err)
	_, err = p.Exec(context.Background(), "UPDATE "+pgx.Identifier{schema, "inbox_keyseq"}.Sanitize()+" SET updated_at = updated_at - interval '2 hours'")
	require.NoError(t, err)
	waitFor(t, "the janitor to remove the backdated IDs and key numbers", func() bool {
		return count("inbox") == 0 && count("inbox_keyseq") == 0
	})
	stop()
	require.Equal(t, map[int32]int64{0: 10, 1: 10}, storedOffsets(t, store, group, topic), "offsets are never removed")
}
