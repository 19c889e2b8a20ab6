package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/outboxrelay/outbox/cmd/outbox/internal/cli"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
)

// demoBackend is the outbox the demo runs on, with a way to append in a
// transaction that commits or rolls back.
type demoBackend struct {
	// name describes the backend in the header.
	name string
	// what names what the demo created in the store and close removes
	// ("" for memory).
	what      string
	store     outbox.Store
	inspector outbox.Inspector
	appendTx  func(ctx context.Context, entries []outbox.Entry, rollback bool) error
	// close closes the backend and removes what the demo created, with a
	// timeout of its own (it also runs after a signal).
	close func() error
}

var errRollback = errors.New("demo: roll back")

// leftBehindError says what the demo could not remove and how to.
type leftBehindError struct {
	what, fix string
	err       error
}

func (e *leftBehindError) Error() string {
	return fmt.Sprintf("could not remove the demo's %s (%v); %s", e.what, e.err, e.fix)
}
func (e *leftBehindError) Unwrap() error { return e.err }

// demoName is a name for the demo's schema or key prefix no other run
// uses.
func demoName(sep string) string {
	return fmt.Sprintf("outbox%sdemo%s%d%s%04x", sep, sep, time.Now().UnixNano(), sep, rand.Uint32N(1<<16))
}

func openDemoBackend(ctx context.Context, c *DemoCmd, logger *slog.Logger) (*demoBackend, error) {
	switch c.Backend {
	case "memory":
		b := memory.New(memory.Options{Partitions: c.Partitions})
		return &demoBackend{
			name: "in-memory backend", store: b, inspector: b,
			close: func() error { return b.Close() },
			appendTx: func(ctx context.Context, entries []outbox.Entry, rollback bool) error {
				tx := b.Begin()
				if err := b.AppendInTx(ctx, tx, entries...); err != nil || rollback {
					_ = tx.Rollback()
					return err
				}
				return tx.Commit()
			},
		}, nil
	case "postgres":
		return openDemoPostgres(ctx, c, logger)
	case "redis":
		return openDemoRedis(ctx, c, logger)
	}
	return nil, fmt.Errorf("demo: --backend %q: use memory, postgres or redis", c.Backend)
}

// storeError is the error for a store URL the demo cannot use (the driver
// refused it, or the store did not answer): what went wrong, the URL with
// its password masked, where the URL came from, the driver's cause, and
// what to change.
func (c *DemoCmd) storeError(what string, err error) error {
	url := cli.RedactText(c.Store, cli.URLSecrets(c.Store)...)
	return fmt.Errorf("demo: %s %s (%v): %w\nhint: %s", what, url, c.origin, cli.Redact(err, c.Store), c.origin.fix())
}

func openDemoPostgres(ctx context.Context, c *DemoCmd, logger *slog.Logger) (*demoBackend, error) {
	cfg, err := pgxpool.ParseConfig(c.Store)
	if err != nil {
		return nil, c.storeError("cannot use the PostgreSQL URL", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		if err = pool.Ping(ctx); err != nil {
			pool.Close()
		}
	}
	if err != nil {
		return nil, c.storeError("cannot reach PostgreSQL at", err)
	}
	schema := demoName("_")
	quoted := pgx.Identifier{schema}.Sanitize()
	// Statements without arguments in the simple protocol: they work
	// through PgBouncer whatever the URL's exec mode, so the schema can be
	// removed even when the run failed on a prepared statement.
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), demoCleanupTimeout)
		defer cancel()
		defer pool.Close()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+quoted+" CASCADE", pgx.QueryExecModeSimpleProtocol); err != nil {
			return &leftBehindError{what: "schema " + schema, err: cli.Redact(err, c.Store), fix: "drop it with: DROP SCHEMA " + quoted + " CASCADE"}
		}
		return nil
	}
	fail := func(err error) (*demoBackend, error) {
		err = fmt.Errorf("demo: setting up the demo's outbox in PostgreSQL schema %s: %w", schema, cli.Redact(err, c.Store))
		return nil, errors.Join(err, drop())
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+quoted, pgx.QueryExecModeSimpleProtocol); err != nil {
		return fail(err)
	}
	opts := pgoutbox.Options{Schema: schema, Partitions: c.Partitions, Logger: logger}
	if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
		return fail(err)
	}
	b, err := pgoutbox.New(ctx, pool, opts)
	if err != nil {
		return fail(err)
	}
	return &demoBackend{
		name: "PostgreSQL backend (schema " + schema + ")", what: "schema " + schema,
		store: b, inspector: b,
		close: func() error { _ = b.Close(); return drop() },
		appendTx: func(ctx context.Context, entries []outbox.Entry, rollback bool) error {
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if err := b.AppendInTx(ctx, tx, entries...); err != nil {
					return err
				}
				if rollback {
					return errRollback
				}
				return nil
			})
			if errors.Is(err, errRollback) {
				return nil
			}
			return err
		},
	}, nil
}

func openDemoRedis(ctx context.Context, c *DemoCmd, logger *slog.Logger) (*demoBackend, error) {
	opts, err := redis.ParseURL(c.Store)
	if err != nil {
		return nil, c.storeError("cannot use the Redis URL", err)
	}
	client := redis.NewClient(opts)
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, c.storeError("cannot reach Redis at", err)
	}
	tag := demoName("-")
	prefix := "{" + tag + "}"
	// Every key of the demo holds the tag: the outbox's and the business
	// hash appended to with the entries.
	cleanup := func() error {
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), demoCleanupTimeout)
		defer cancel()
		var keys []string
		iter := client.Scan(ctx, 0, "*"+tag+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		err := iter.Err()
		if err == nil && len(keys) > 0 {
			err = client.Del(ctx, keys...).Err()
		}
		if err != nil {
			return &leftBehindError{what: "keys " + prefix + "*", err: cli.Redact(err, c.Store),
				fix: "delete them with: redis-cli --scan --pattern '*" + tag + "*' | xargs redis-cli del"}
		}
		return nil
	}
	b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix, Partitions: c.Partitions, Logger: logger})
	if err != nil {
		err = fmt.Errorf("demo: setting up the demo's outbox in Redis at prefix %s: %w", prefix, cli.Redact(err, c.Store))
		return nil, errors.Join(err, cleanup())
	}
	return &demoBackend{
		name: "Redis backend (prefix " + prefix + ")", what: "keys " + prefix + "*",
		store: b, inspector: b,
		close: func() error { _ = b.Close(); return cleanup() },
		appendTx: func(ctx context.Context, entries []outbox.Entry, rollback bool) error {
			// The business write and the entries go in one MULTI/EXEC;
			// a rollback is a DISCARD.
			pipe := client.TxPipeline()
			pipe.HSet(ctx, prefix+":orders", entries[0].Key, "updated")
			if err := b.AppendInTx(ctx, pipe, entries...); err != nil || rollback {
				pipe.Discard()
				return err
			}
			_, err := pipe.Exec(ctx)
			return err
		},
	}, nil
}

// pgBouncerHint adds what to do to an error that says a prepared statement
// went missing or exists twice on the server: what pgx's default exec mode
// meets behind PgBouncer in transaction pooling mode.
func pgBouncerHint(err error) error {
	if err == nil || !isPreparedStatementError(err) || strings.Contains(err.Error(), "default_query_exec_mode") {
		return err
	}
	var ee *cli.ExitError
	code := 1
	if errors.As(err, &ee) {
		code = ee.Code
	}
	return &cli.ExitError{Code: code, Err: fmt.Errorf("%w\nhint: the server does not keep prepared statements between transactions, as PgBouncer in transaction pooling mode does: "+
		"add default_query_exec_mode=simple_protocol to the PostgreSQL URL (postgres://user@host:6432/db?default_query_exec_mode=simple_protocol)", err)}
}

// isPreparedStatementError reports whether err is PostgreSQL's "prepared
// statement ... does not exist" (26000) or "already exists" (42P05).
func isPreparedStatementError(err error) bool {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code == "26000" || pg.Code == "42P05"
	}
	s := err.Error()
	return strings.Contains(s, "prepared statement") && (strings.Contains(s, "does not exist") || strings.Contains(s, "already exists"))
}
