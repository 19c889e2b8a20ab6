package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// seed appends five entries and parks three of them through the SPI.
func seed(t *testing.T, store outbox.Store, appendFn func(...outbox.Entry) error) {
	t.Helper()
	ctx := context.Background()
	var entries []outbox.Entry
	for i := range 5 {
		entries = append(entries, outbox.Entry{ID: fmt.Sprintf("e%d", i), Topic: "orders", Key: fmt.Sprint("k", i)})
	}
	if err := appendFn(entries...); err != nil {
		t.Fatal(err)
	}
	lease, err := store.AcquireLease(ctx, 0, "admin-test", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := store.FindPendingBatch(ctx, lease, 10)
	if err != nil || len(batch) != 5 {
		t.Fatalf("batch = %d entries, %v", len(batch), err)
	}
	var fails []outbox.Failure
	for _, id := range []string{"e1", "e2", "e3"} {
		fails = append(fails, outbox.Failure{ID: id, Error: "broker said\nno: " + id, Park: true})
	}
	if err := store.MarkFailed(ctx, lease, fails); err != nil {
		t.Fatal(err)
	}
	if err := store.Release(ctx, lease, []string{"e0", "e4"}); err != nil {
		t.Fatal(err)
	}
	if err := store.ReleaseLease(ctx, lease); err != nil {
		t.Fatal(err)
	}
}

func admin(t *testing.T, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	if err := runAdmin(args[0], args[1:], &out); err != nil {
		t.Fatalf("outbox %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func exerciseAdmin(t *testing.T, flags ...string) {
	with := func(cmd string, rest ...string) []string { return append(append([]string{cmd}, flags...), rest...) }

	if got := admin(t, with("status")...); !strings.Contains(got, "pending  2\n") || !strings.Contains(got, "parked   3\n") {
		t.Fatalf("status:\n%s", got)
	}
	got := admin(t, with("parked", "-limit", "2")...)
	if !strings.Contains(got, "e1") || !strings.Contains(got, "e2") || strings.Contains(got, "e3") ||
		!strings.Contains(got, "broker said no: e1") || !strings.Contains(got, "(more: -after e2)") {
		t.Fatalf("parked page 1:\n%s", got)
	}
	if got := admin(t, with("parked", "-after", "e2")...); !strings.Contains(got, "e3") || strings.Contains(got, "e1") {
		t.Fatalf("parked page 2:\n%s", got)
	}
	if got := admin(t, with("requeue", "e1")...); got != "requeued 1 entries\n" {
		t.Fatalf("requeue e1: %q", got)
	}
	if got := admin(t, with("requeue", "-all", "-limit", "1")...); got != "requeued 2 entries\n" {
		t.Fatalf("requeue -all: %q", got)
	}
	if got := admin(t, with("cancel", "e0", "nope")...); got != "e0: cancelled\nnope: not found (already sent, cancelled, or never appended)\n" {
		t.Fatalf("cancel: %q", got)
	}
	if got := admin(t, with("status")...); !strings.Contains(got, "pending  4\n") || !strings.Contains(got, "parked   0\n") {
		t.Fatalf("status after requeue and cancel:\n%s", got)
	}
}

func TestAdminOnPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.PostgresURL()
	pool, err := pgxpool.New(ctx, url)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	t.Cleanup(pool.Close) // after the schema is dropped (cleanups run last-in first-out)
	schema := fmt.Sprintf("admin_test_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping the test's schema: %v", err)
		}
	})
	opts := pgoutbox.Options{Schema: schema}
	if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	b, err := pgoutbox.New(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	seed(t, b, func(e ...outbox.Entry) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, e...) })
	})
	exerciseAdmin(t, "-postgres", url, "-schema", schema)
}

func TestAdminOnRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.RedisURL()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() }) // after the key cleanup below (cleanups run last-in first-out)
	if err := client.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, "Redis", "OUTBOX_REDIS_URL", err)
	}
	prefix := fmt.Sprintf("{admin-test-%d}", time.Now().UnixNano())
	t.Cleanup(func() {
		var keys []string
		iter := client.Scan(ctx, 0, "*"+prefix[1:len(prefix)-1]+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("listing the test's keys: %v", err)
		}
		if len(keys) > 0 {
			if err := client.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("deleting the test's keys: %v", err)
			}
		}
	})
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	seed(t, b, func(e ...outbox.Entry) error { return b.Append(ctx, e...) })
	exerciseAdmin(t, "-redis", url, "-prefix", prefix)
}

func TestAdminNeedsExactlyOneOutbox(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := runAdmin("status", []string{"-postgres", "x", "-redis", "y"}, &out)
	if err == nil || !strings.Contains(err.Error(), "exactly one") {
		t.Fatalf("err = %v", err)
	}
	err = runAdmin("status", nil, &out)
	if err == nil || !strings.Contains(err.Error(), "-postgres URL") {
		t.Fatalf("err = %v", err)
	}
	err = runAdmin("status", []string{"-postgres", "postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=1"}, &out)
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("an unreachable database must fail without printing the password: %v", err)
	}
}
