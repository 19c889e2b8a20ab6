package ops_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	"github.com/outboxrelay/outbox/internal/ops"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// store is what the tests need of a backend: the operator interfaces ops
// works through, and Import to seed entries parked or pending, with their
// created-at times, in one call.
type store interface {
	outbox.Store
	outbox.Inspector
	outbox.Looker
	outbox.Canceler
	outbox.Importer
}

// backends open a fresh, empty outbox of each backend; Postgres and Redis
// skip when the service is not reachable (see internal/testenv).
var backends = []struct {
	name string
	open func(t *testing.T) store
}{
	{"Memory", func(*testing.T) store { return memory.New(memory.Options{Partitions: 2}) }},
	{"Postgres", openPostgres},
	{"Redis", openRedis},
}

// eachBackend runs test against a fresh outbox of every backend, in
// parallel.
func eachBackend(t *testing.T, test func(t *testing.T, s store)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			test(t, b.open(t))
		})
	}
}

func randHex(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func openPostgres(t *testing.T) store {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, testenv.PostgresURL())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	t.Cleanup(pool.Close)
	schema := "ops_test_" + randHex(t)
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping %s: %v", schema, err)
		}
	})
	opts := pgoutbox.Options{Schema: schema, Partitions: 2}
	if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	b, err := pgoutbox.New(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func openRedis(t *testing.T) store {
	opt, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, "Redis", "OUTBOX_REDIS_URL", err)
	}
	tag := "opstest-" + randHex(t)
	t.Cleanup(func() {
		keys, _ := client.Keys(context.Background(), "{"+tag+"}*").Result()
		if len(keys) > 0 {
			_ = client.Del(context.Background(), keys...).Err()
		}
	})
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: "{" + tag + "}", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// epoch is the created-at time of the seeded entries' first.
var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// seed imports entries into s: parked ones p00, p01, ... (n of them,
// topics orders and payments alternating, keys k0..k2, errors "timeout"
// on even ones, created a minute apart but in reverse ID order, so that
// ID order and creation order differ), and pending ones q00, ... (m).
func seed(t *testing.T, s store, n, m int) {
	t.Helper()
	var es []outbox.EntryInfo
	for i := range n {
		e := outbox.Entry{
			ID: fmt.Sprintf("p%02d", i), Topic: []string{"orders", "payments"}[i%2], Key: fmt.Sprintf("k%d", i%3),
			Payload: []byte(`{"n":1}`), Headers: map[string]string{"h": "v"}, Attempts: 3,
			LastError: []string{"kafka: Timeout", "refused"}[i%2], CreatedAt: epoch.Add(time.Duration(n-i) * time.Minute),
		}
		es = append(es, outbox.EntryInfo{Entry: e, Parked: true})
	}
	for i := range m {
		es = append(es, outbox.EntryInfo{Entry: outbox.Entry{ID: fmt.Sprintf("q%02d", i), Topic: "orders", Key: "k9", CreatedAt: epoch}})
	}
	got, err := s.Import(context.Background(), es)
	if err != nil || got != len(es) {
		t.Fatalf("Import: %d, %v; want %d", got, err, len(es))
	}
}

// parkedIDs lists the IDs of every parked entry of s.
func parkedIDs(t *testing.T, s store) []string {
	t.Helper()
	es, _, err := ops.Collect(context.Background(), s, ops.Filter{}, ops.CollectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}
