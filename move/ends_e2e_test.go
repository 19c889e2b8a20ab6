package move_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
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
)

// e2eEnd is one outbox of an end-to-end move test: the store and how a
// service appends to it (one transaction per call).
type e2eEnd struct {
	kind   string // "memory", "postgres", "mysql", "redis"
	store  outbox.Store
	append func(ctx context.Context, entries ...outbox.Entry) error
}

// newEnd makes an outbox of the given kind and partition count of the
// test's own (a fresh schema or key prefix), closed and removed when the
// test ends.
type newEnd func(t *testing.T, partitions int) e2eEnd

func memoryEnd(t *testing.T, partitions int) e2eEnd {
	t.Helper()
	b := memory.New(memory.Options{Partitions: partitions})
	t.Cleanup(func() { _ = b.Close() })
	return e2eEnd{kind: "memory", store: b, append: b.Append}
}

func randomName() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// postgresEnd makes a Postgres outbox in a fresh schema of its own.
func postgresEnd(t *testing.T, partitions int) e2eEnd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	if err != nil {
		t.Fatalf("OUTBOX_POSTGRES_URL: %v", err)
	}
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	t.Cleanup(pool.Close)
	schema := "move_e2e_" + randomName()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	opts := pgoutbox.Options{Schema: schema, Partitions: partitions}
	if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
		t.Fatal(err)
	}
	b, err := pgoutbox.New(ctx, pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return e2eEnd{kind: "postgres", store: b, append: func(ctx context.Context, entries ...outbox.Entry) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return b.AppendInTx(ctx, tx, entries...) })
	}}
}

// redisEnd makes a Redis outbox under a fresh key prefix of its own.
func redisEnd(t *testing.T, partitions int) e2eEnd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opt, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		t.Fatalf("OUTBOX_REDIS_URL: %v", err)
	}
	client := redis.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	if err := client.Ping(ctx).Err(); err != nil {
		testenv.Unavailable(t, "Redis", "OUTBOX_REDIS_URL", err)
	}
	tag := "move_e2e_" + randomName()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := client.Scan(ctx, 0, "*"+tag+"*", 1000).Iterator()
		for iter.Next(ctx) {
			_ = client.Del(ctx, iter.Val()).Err()
		}
		if err := iter.Err(); err != nil {
			t.Errorf("deleting the test's keys: %v", err)
		}
	})
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: "{" + tag + "}", Partitions: partitions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return e2eEnd{kind: "redis", store: b, append: b.Append}
}

// mysqlEnd makes a MySQL outbox in a fresh database of its own
// (OUTBOX_MYSQL_URL), dropped when the test ends.
func mysqlEnd(t *testing.T, partitions int) e2eEnd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := sql.Open("mysql", testenv.MySQLDSN(""))
	if err == nil {
		err = admin.PingContext(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "MySQL", "OUTBOX_MYSQL_URL", err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	name := "move_e2e_" + randomName()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
	})
	db, err := sql.Open("mysql", testenv.MySQLDSN(name))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(12)
	t.Cleanup(func() { _ = db.Close() })
	opts := mysqloutbox.Options{Partitions: partitions}
	if err := mysqloutbox.Migrate(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	b, err := mysqloutbox.New(ctx, db, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return e2eEnd{kind: "mysql", store: b, append: func(ctx context.Context, entries ...outbox.Entry) error {
		return b.InTx(ctx, db, func(tx *sql.Tx) error { return b.AppendInTx(ctx, tx, entries...) })
	}}
}

// requireMovable skips t while a store lacks the interfaces a move needs
// (they land backend by backend).
func requireMovable(t *testing.T, ends ...e2eEnd) {
	t.Helper()
	for _, e := range ends {
		_, ex := e.store.(outbox.Exporter)
		_, im := e.store.(outbox.Importer)
		_, ho := e.store.(outbox.Holder)
		_, se := e.store.(outbox.Sealer)
		if !ex || !im || !ho || !se {
			t.Skipf("%T does not implement the move interfaces (Exporter, Importer, Holder, Sealer) yet", e.store)
		}
	}
}
