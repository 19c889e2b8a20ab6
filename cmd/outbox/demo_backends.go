package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
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
	name      string
	store     outbox.Store
	inspector outbox.Inspector
	appendTx  func(ctx context.Context, entries []outbox.Entry, rollback bool) error
	close     func()
}

var errRollback = errors.New("demo: roll back")

func openDemoBackend(ctx context.Context, c demoConfig) (*demoBackend, error) {
	switch c.backend {
	case "memory":
		b := memory.New(memory.Options{Partitions: c.partitions})
		return &demoBackend{
			name: "in-memory", store: b, inspector: b, close: func() { b.Close() },
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
		pool, err := pgxpool.New(ctx, c.postgres)
		if err == nil {
			err = pool.Ping(ctx)
		}
		if err != nil {
			return nil, fmt.Errorf("-backend postgres: cannot reach PostgreSQL (set -postgres or OUTBOX_POSTGRES_URL): %w", redact(err, c.postgres))
		}
		schema := fmt.Sprintf("outbox_demo_%d", time.Now().UnixNano())
		drop := func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			pool.Close()
		}
		opts := pgoutbox.Options{Schema: schema, Partitions: c.partitions}
		if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
			drop()
			return nil, err
		}
		if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
			drop()
			return nil, err
		}
		b, err := pgoutbox.New(pool, opts)
		if err != nil {
			drop()
			return nil, err
		}
		return &demoBackend{
			name: "PostgreSQL (schema " + schema + ")", store: b, inspector: b,
			close: func() { b.Close(); drop() },
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

	case "redis":
		opts, err := redis.ParseURL(c.redisURL)
		if err != nil {
			return nil, fmt.Errorf("-backend redis: %w", redact(err, c.redisURL))
		}
		client := redis.NewClient(opts)
		if err := client.Ping(ctx).Err(); err != nil {
			client.Close()
			return nil, fmt.Errorf("-backend redis: cannot reach Redis (set -redis or OUTBOX_REDIS_URL): %w", err)
		}
		tag := fmt.Sprintf("outbox-demo-%d", time.Now().UnixNano())
		b, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: "{" + tag + "}", Partitions: c.partitions})
		if err != nil {
			client.Close()
			return nil, err
		}
		cleanup := func() {
			b.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			iter := client.Scan(ctx, 0, "*"+tag+"*", 1000).Iterator()
			for iter.Next(ctx) {
				client.Del(ctx, iter.Val())
			}
			client.Close()
		}
		return &demoBackend{
			name: "Redis (prefix {" + tag + "})", store: b, inspector: b, close: cleanup,
			appendTx: func(ctx context.Context, entries []outbox.Entry, rollback bool) error {
				// The business write and the entries go in one MULTI/EXEC;
				// a rollback is a DISCARD.
				pipe := client.TxPipeline()
				pipe.HSet(ctx, "{"+tag+"}:orders", entries[0].Key, "updated")
				if err := b.AppendInTx(ctx, pipe, entries...); err != nil || rollback {
					pipe.Discard()
					return err
				}
				_, err := pipe.Exec(ctx)
				return err
			},
		}, nil
	}
	return nil, fmt.Errorf("-backend %q: use memory, postgres or redis", c.backend)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
