package pgoutbox_test

// The backend behind a real PgBouncer in transaction pooling mode
// (scripts/pgbouncer.sh, started by scripts/test.sh, which exports
// OUTBOX_PGBOUNCER_URL). In that mode a client gets a server connection
// per transaction, so:
//
//   - prepared statements do not survive from one transaction to the next:
//     the pool must use pgx's simple protocol (default_query_exec_mode=
//     simple_protocol in the URL) or QueryExecModeExec;
//   - LISTEN does not work: the session that ran it goes back to the pool,
//     and PgBouncer drops a server connection that receives a notification
//     while no client is linked to it ("got packet 'A' from server when not
//     linked"). Options.ListenConfig points the listener at PostgreSQL
//     directly;
//   - migrations go directly to PostgreSQL too (DDL and the migration lock
//     are safest on a session of their own).

import (
	"context"
	"errors"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	"github.com/outboxrelay/outbox/conformance"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// bouncerURL returns OUTBOX_PGBOUNCER_URL with database db (the URL's own
// when empty) and exec mode mode (none when empty), or skips (fails under
// OUTBOX_REQUIRE_SERVICES=1) when it is unset.
func bouncerURL(t testing.TB, db, mode string) string {
	t.Helper()
	raw := os.Getenv("OUTBOX_PGBOUNCER_URL")
	if raw == "" {
		msg := "OUTBOX_PGBOUNCER_URL is not set: ./scripts/test.sh sets it when pgbouncer is installed (apt-get install pgbouncer, or ./scripts/services.sh install); or run ./scripts/pgbouncer.sh start and export OUTBOX_PGBOUNCER_URL=$(./scripts/pgbouncer.sh url)"
		if testenv.Required() {
			t.Fatal(msg + " [OUTBOX_REQUIRE_SERVICES=1, so this is a failure]")
		}
		t.Skip(msg)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("OUTBOX_PGBOUNCER_URL: %v", err)
	}
	if db != "" {
		u.Path = "/" + db
	}
	if mode != "" {
		q := u.Query()
		q.Set("default_query_exec_mode", mode)
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// bouncer holds the pools through PgBouncer the conformance suite shares,
// one per exec mode, like env_test.go's pools.
var bouncer struct {
	sync.Mutex
	pools map[string]*pgxpool.Pool
}

func bouncerPool(t testing.TB, mode string) *pgxpool.Pool {
	t.Helper()
	bouncer.Lock()
	defer bouncer.Unlock()
	if p := bouncer.pools[mode]; p != nil {
		return p
	}
	p := connectBouncer(t, bouncerURL(t, "", mode), 10)
	if bouncer.pools == nil {
		bouncer.pools = map[string]*pgxpool.Pool{}
	}
	bouncer.pools[mode] = p // closed with the process: the suite's cases share it
	return p
}

// connectBouncer opens a pool of at most maxConns connections to u and
// pings it.
func connectBouncer(t testing.TB, u string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatalf("OUTBOX_PGBOUNCER_URL: %v", err)
	}
	cfg.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		err = p.Ping(ctx)
	}
	if err != nil {
		if p != nil {
			p.Close()
		}
		if testenv.Required() {
			t.Fatalf("PgBouncer at OUTBOX_PGBOUNCER_URL does not answer: %v [OUTBOX_REQUIRE_SERVICES=1, so this is a failure]", err)
		}
		t.Skipf("PgBouncer at OUTBOX_PGBOUNCER_URL does not answer: %v (./scripts/pgbouncer.sh start)", err)
	}
	return p
}

// TestConformancePgBouncer runs the conformance suite with the backend's
// pool behind PgBouncer in transaction pooling mode, in the two pgx exec
// modes that need no prepared statement to outlive a transaction
// (default_query_exec_mode=simple_protocol and exec); migrations and the
// LISTEN connection go to PostgreSQL directly.
func TestConformancePgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"simple_protocol", "exec"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			through := bouncerPool(t, mode)
			direct := pool(t, pgx.QueryExecModeSimpleProtocol)
			listen := direct.Config().ConnConfig.Copy()
			conformance.Run(t, func(t *testing.T, cfg conformance.Config) conformance.Harness[pgx.Tx] {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				o := pgoutbox.Options{Schema: freshSchema(t, direct), Partitions: cfg.Partitions, ListenConfig: listen, Archive: cfg.Archive}
				mo := o
				mo.Partitions = max(cfg.Partitions, 1)
				if err := pgoutbox.Migrate(ctx, direct, mo); err != nil {
					t.Fatalf("Migrate: %v", err)
				}
				b, err := pgoutbox.New(ctx, through, o)
				if err != nil {
					t.Fatalf("New through PgBouncer: %v", err)
				}
				t.Cleanup(func() { _ = b.Close() })
				return harness{b: b, pool: through, opts: o}
			})
		})
	}
}

// TestPgBouncerPreparedStatementHint: with pgx's default exec mode
// (statements prepared and cached per connection) behind transaction
// pooling, a statement prepared in one transaction's server connection is
// missing in the next one's, and the backend's error says what to set.
//
// It uses the PgBouncer database "outbox_lifo" (scripts/pgbouncer.sh: the
// same PostgreSQL database with a server pool of its own, which nothing
// else uses), so it knows which server connection each transaction gets:
// the first transaction opens the pool's only server connection, S1; a
// second client then holds S1 in a transaction, so the backend's next
// transaction runs on a new connection, S2, where its cached statement
// does not exist.
func TestPgBouncerPreparedStatementHint(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lifo := bouncerURL(t, "outbox_lifo", "") // pgx's default: cache_statement
	direct := pool(t, pgx.QueryExecModeSimpleProtocol)
	schema := freshSchema(t, direct)
	if err := pgoutbox.Migrate(ctx, direct, pgoutbox.Options{Schema: schema, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	p := connectBouncer(t, lifo, 1)
	defer p.Close()
	b, err := pgoutbox.New(ctx, p, pgoutbox.Options{Schema: schema, NoNotify: true})
	if err != nil {
		if strings.Contains(err.Error(), "outbox_lifo") {
			t.Fatalf("the PgBouncer at OUTBOX_PGBOUNCER_URL has no database outbox_lifo (scripts/pgbouncer.sh defines it): %v", err)
		}
		t.Fatal(err)
	}
	defer b.Close()
	appendOne := func(id string) error {
		tx, err := p.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := b.AppendInTx(ctx, tx, outbox.Entry{ID: id, Topic: "t", Key: "k"}); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	if err := appendOne("first"); err != nil { // prepares on S1
		t.Fatalf("first append: %v", err)
	}

	holder, err := pgx.Connect(ctx, lifo)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	hold, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, "SELECT 1"); err != nil { // S1 is now held
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback(context.Background()) }()

	err = appendOne("second") // on S2, with S1's cached statement
	if err == nil {
		t.Fatal("the second append through transaction pooling with cached statements succeeded; the test's premise (one server connection per transaction) does not hold")
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || (pgErr.Code != "26000" && pgErr.Code != "42P05") {
		t.Fatalf("error %v is not PostgreSQL's prepared-statement error (26000 or 42P05)", err)
	}
	for _, want := range []string{"pgoutbox: ", "PgBouncer", "default_query_exec_mode=simple_protocol", "QueryExecMode", "stmtcache_"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	}
	t.Logf("the error: %v", err)
}
