package pgoutbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// Tests share one pool per protocol (the server allows 100 connections in
// all) and isolate themselves by schema.
var pools struct {
	sync.Mutex
	byMode map[pgx.QueryExecMode]*pgxpool.Pool
	err    error
}

func TestMain(m *testing.M) {
	// The conformance cases spend their time waiting on real lease TTLs
	// and schedules, not on the CPU; with the default -parallel
	// (GOMAXPROCS) the package would take much longer. Raise it to 8
	// unless the caller chose a value. The suite's timing does not depend
	// on the machine's speed (see conformance/timing.go), so this only
	// trades wall time for load.
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "8")
	}
	examplesNeedPostgres()
	code := m.Run()
	pools.Lock()
	for _, p := range pools.byMode {
		p.Close()
	}
	pools.Unlock()
	os.Exit(code)
}

// examplesNeedPostgres makes the Examples (example_test.go) runnable or
// leaves them out. They run against a real PostgreSQL and compare what
// they print with their Output comments, and an Example cannot skip
// itself. So TestMain checks once that the server answers: when it does,
// the Examples read its URL from OUTBOX_POSTGRES_URL (set here when the
// variable was unset and testenv found the server elsewhere); when it
// does not and OUTBOX_REQUIRE_SERVICES is not 1, every Example is left out
// through -test.skip, and this says so on stderr (go test shows no SKIP
// line for an Example). With OUTBOX_REQUIRE_SERVICES=1 they run anyway and
// fail, as the tests do.
func examplesNeedPostgres() {
	url := testenv.PostgresURL()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := ping(ctx, url)
	if err == nil {
		_ = os.Setenv("OUTBOX_POSTGRES_URL", url)
		return
	}
	if testenv.Required() {
		return
	}
	testenv.SkipExamples("pgoutbox", "PostgreSQL", "no server answers ("+err.Error()+"); set OUTBOX_POSTGRES_URL or run ./scripts/services.sh start")
}

func ping(ctx context.Context, url string) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.Ping(ctx)
}

// pool returns the shared pool for mode, or skips (fails under
// OUTBOX_REQUIRE_SERVICES=1) when PostgreSQL is unreachable.
func pool(t testing.TB, mode pgx.QueryExecMode) *pgxpool.Pool {
	t.Helper()
	pools.Lock()
	defer pools.Unlock()
	if p := pools.byMode[mode]; p != nil {
		return p
	}
	if pools.err != nil {
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", pools.err)
	}
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL())
	if err != nil {
		t.Fatalf("OUTBOX_POSTGRES_URL: %v", err)
	}
	cfg.MaxConns = 20
	cfg.ConnConfig.DefaultQueryExecMode = mode
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = p.Ping(ctx)
	}
	if err != nil {
		pools.err = err
		testenv.Unavailable(t, "PostgreSQL", "OUTBOX_POSTGRES_URL", err)
	}
	if pools.byMode == nil {
		pools.byMode = map[pgx.QueryExecMode]*pgxpool.Pool{}
	}
	pools.byMode[mode] = p
	return p
}

// freshSchema returns a new schema name, dropped with everything in it
// when t ends.
func freshSchema(t testing.TB, p *pgxpool.Pool) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "pgoutbox_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := p.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping test schema %s: %v", schema, err)
		}
	})
	return schema
}

// newBackend migrates a fresh schema with opts.Partitions partitions (1
// when 0) and returns a backend on it, made with opts (so Partitions 0
// reads the stored count).
func newBackend(t testing.TB, mode pgx.QueryExecMode, opts pgoutbox.Options) (*pgoutbox.Backend, *pgxpool.Pool) {
	t.Helper()
	p := pool(t, mode)
	opts.Schema = freshSchema(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mo := opts
	mo.Partitions = max(opts.Partitions, 1)
	if err := pgoutbox.Migrate(ctx, p, mo); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	b, err := pgoutbox.New(ctx, p, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b, p
}
