package ui_test

// The stores and servers the browser tests (browser_test.go) run against:
// memory, and PostgreSQL, MySQL and Redis through testenv, each test in
// its own schema, database or key prefix; and seeding them with parked and pending entries
// through the SPI alone.

import (
	"context"
	"database/sql"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
	"github.com/outboxrelay/outbox/internal/testenv"
	"github.com/outboxrelay/outbox/ui"
)

// browserStore is an outbox store and the way to append to it.
type browserStore struct {
	kind   string
	store  outbox.Store
	append func(ctx context.Context, entries ...outbox.Entry) error
}

func (s browserStore) inspector() outbox.Inspector { return s.store.(outbox.Inspector) }

func browserMemory(t *testing.T, partitions int) browserStore {
	b := memory.New(memory.Options{Partitions: partitions})
	t.Cleanup(func() { _ = b.Close() })
	return browserStore{kind: "memory", store: b, append: b.Append}
}

var browserNameSeq atomic.Int64

// browserName is a schema or key tag no other test of this run uses.
func browserName(kind string) string {
	return fmt.Sprintf("ui_%s_%d_%d", kind, time.Now().UnixNano()%1e9, browserNameSeq.Add(1))
}

// browserPostgres is an outbox in a schema of t's own, dropped at its end;
// it skips t when PostgreSQL is not reachable (fails it under
// OUTBOX_REQUIRE_SERVICES=1).
func browserPostgres(t *testing.T, partitions int) browserStore {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.PostgresURL())
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	t.Cleanup(pool.Close)
	schema := browserName("s")
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping the test's schema: %v", err)
		}
	})
	opts := pgoutbox.Options{Schema: schema, Partitions: partitions, NoNotify: true}
	if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	b, err := pgoutbox.New(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return browserStore{kind: "postgres", store: b, append: func(ctx context.Context, entries ...outbox.Entry) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, entries...) })
	}}
}

// browserMySQL is an outbox in a database of t's own, dropped at its end;
// it skips t when MySQL is not reachable (fails it under
// OUTBOX_REQUIRE_SERVICES=1).
func browserMySQL(t *testing.T, partitions int) browserStore {
	t.Helper()
	ctx := context.Background()
	admin, err := sql.Open("mysql", testenv.MySQLDSN(""))
	if err == nil {
		err = admin.PingContext(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "MySQL", "OUTBOX_MYSQL_URL", err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	name := browserName("d")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("dropping the test's database: %v", err)
		}
	})
	db, err := sql.Open("mysql", testenv.MySQLDSN(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	opts := mysqloutbox.Options{Partitions: partitions, NoNotify: true}
	if err := mysqloutbox.Migrate(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	b, err := mysqloutbox.New(ctx, db, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return browserStore{kind: "mysql", store: b, append: func(ctx context.Context, entries ...outbox.Entry) error {
		return b.InTx(ctx, db, func(tx *sql.Tx) error { return b.AppendInTx(ctx, tx, entries...) })
	}}
}

// browserRedis is an outbox under a key prefix of t's own, whose keys are
// deleted at its end; it skips t when Redis is not reachable (fails it
// under OUTBOX_REQUIRE_SERVICES=1).
func browserRedis(t *testing.T, partitions int) browserStore {
	t.Helper()
	ctx := context.Background()
	opt, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	if err := client.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, "Redis", "OUTBOX_REDIS_URL", err)
	}
	tag := browserName("p")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := client.Scan(ctx, 0, "*"+tag+"*", 1000).Iterator()
		for iter.Next(ctx) {
			_ = client.Del(ctx, iter.Val()).Err()
		}
		if err := iter.Err(); err != nil {
			t.Errorf("deleting the test's keys: %v", err)
		}
	})
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: "{" + tag + "}", Partitions: partitions, NoNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return browserStore{kind: "redis", store: b, append: b.Append}
}

// parkEntries appends entries and parks every pending entry of the store (so call
// it before appending the entries meant to stay pending): each is failed
// attempts-1 times, then parked with the error reason returns for it.
// attempts returns at least 1.
func parkEntries(t *testing.T, s browserStore, entries []outbox.Entry, attempts func(id string) int, reason func(id string) string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < len(entries); i += 1000 {
		if err := s.append(ctx, entries[i:min(i+1000, len(entries))]...); err != nil {
			t.Fatalf("appending: %v", err)
		}
	}
	tries := map[string]int{}
	for p := range s.store.Partitions() {
		lease, err := s.store.AcquireLease(ctx, p, "ui-browser-test", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for {
			batch, err := s.store.FindPendingBatch(ctx, lease, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if len(batch) == 0 {
				break
			}
			failures := make([]outbox.Failure, len(batch))
			for i, e := range batch {
				tries[e.ID]++
				failures[i] = outbox.Failure{ID: e.ID, Error: reason(e.ID), Park: tries[e.ID] >= attempts(e.ID)}
			}
			if err := s.store.MarkFailed(ctx, lease, failures); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.store.ReleaseLease(ctx, lease); err != nil {
			t.Fatal(err)
		}
	}
}

// storeParkedIDs lists the IDs of every parked entry of s.
func storeParkedIDs(t *testing.T, s browserStore) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ids := map[string]bool{}
	after := ""
	for {
		page, err := s.inspector().Parked(ctx, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return ids
		}
		for _, e := range page {
			ids[e.ID] = true
		}
		after = page[len(page)-1].ID
	}
}

func storeStats(t *testing.T, s browserStore) outbox.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.inspector().Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// serveBrowser starts the dashboard over s, with its sampler, on a loopback
// listener, and returns its URL; both stop when t ends.
func serveBrowser(t *testing.T, s browserStore, opts ui.Options) string {
	t.Helper()
	if opts.SampleInterval == 0 {
		opts.SampleInterval = 250 * time.Millisecond
	}
	if opts.Kind == "" {
		opts.Kind = s.kind
	}
	srv, err := ui.New(s.store, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		ts.Close()
		cancel()
		<-done
		_ = srv.Close()
	})
	return ts.URL
}
