package pginbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxrelay/outbox/backends/postgres/pginbox"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// Tests share one pool (and one *sql.DB over it) and isolate themselves
// by schema.
var shared struct {
	sync.Mutex
	pool   *pgxpool.Pool
	simple *pgxpool.Pool // the simple protocol, as behind PgBouncer's transaction pooling
	db     *sql.DB
	err    error
}

func TestMain(m *testing.M) {
	examplesNeedPostgres()
	code := m.Run()
	shared.Lock()
	if shared.db != nil {
		_ = shared.db.Close()
	}
	for _, p := range []*pgxpool.Pool{shared.pool, shared.simple} {
		if p != nil {
			p.Close()
		}
	}
	shared.Unlock()
	os.Exit(code)
}

// examplesNeedPostgres makes the Examples runnable or leaves them out, as
// pgoutbox's tests do: an Example cannot skip itself, so when no server
// answers (and OUTBOX_REQUIRE_SERVICES is not 1) they are left out through
// -test.skip, and this says so on stderr; otherwise they read the URL from
// OUTBOX_POSTGRES_URL.
func examplesNeedPostgres() {
	url := testenv.PostgresURL()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err == nil {
		err = c.Ping(ctx)
		_ = c.Close(ctx)
	}
	if err == nil {
		_ = os.Setenv("OUTBOX_POSTGRES_URL", url)
		return
	}
	if testenv.Required() {
		return
	}
	testenv.SkipExamples("pginbox", "PostgreSQL", "no server answers ("+err.Error()+"); set OUTBOX_POSTGRES_URL or run ./scripts/services.sh start")
}

// pool returns the shared pool, or skips (fails under
// OUTBOX_REQUIRE_SERVICES=1) when PostgreSQL is unreachable.
func pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.pool != nil {
		return shared.pool
	}
	if shared.err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", shared.err)
	}
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	if err != nil {
		t.Fatalf("OUTBOX_POSTGRES_URL: %v", err)
	}
	cfg.MaxConns = 16
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = p.Ping(ctx)
	}
	if err != nil {
		shared.err = err
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	shared.pool = p
	shared.db = stdlib.OpenDBFromPool(p)
	return p
}

// simplePool returns a pool of its own that runs every statement with the
// simple protocol (no prepared statements: what PgBouncer's transaction
// pooling needs).
func simplePool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool(t)
	shared.Lock()
	defer shared.Unlock()
	if shared.simple != nil {
		return shared.simple
	}
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	if err != nil {
		t.Fatalf("OUTBOX_POSTGRES_URL: %v", err)
	}
	cfg.MaxConns = 8
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("simple-protocol pool: %v", err)
	}
	shared.simple = p
	return p
}

// sqlDB is a database/sql handle on the shared pool (pgx's stdlib).
func sqlDB(t testing.TB) *sql.DB {
	t.Helper()
	pool(t)
	shared.Lock()
	defer shared.Unlock()
	return shared.db
}

// freshSchema returns a new schema name, dropped with everything in it
// when t ends.
func freshSchema(t testing.TB) string {
	t.Helper()
	p := pool(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "pginbox_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := p.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping test schema %s: %v", schema, err)
		}
	})
	return schema
}

// migrated migrates a fresh schema and returns the options naming its
// inbox.
func migrated(t testing.TB) pginbox.Options {
	t.Helper()
	opts := pginbox.Options{Schema: freshSchema(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := pginbox.Migrate(ctx, pool(t), opts); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return opts
}

func newStore(t testing.TB) (*pginbox.Store, pginbox.Options) {
	t.Helper()
	opts := migrated(t)
	s, err := pginbox.New(pool(t), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, opts
}

func newSQLStore(t testing.TB) (*pginbox.SQLStore, pginbox.Options) {
	t.Helper()
	opts := migrated(t)
	s, err := pginbox.NewSQL(sqlDB(t), opts)
	if err != nil {
		t.Fatalf("NewSQL: %v", err)
	}
	return s, opts
}
