package appender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
)

// store appends one entry per transaction.
type store interface {
	// partitions is the outbox's partition count.
	partitions() int
	// appendOne appends e in a transaction of its own. intent is called
	// after the append is queued and before the commit; its error (the
	// history failed) is returned as it is, after the transaction was
	// abandoned. Any other error is an *attemptError.
	appendOne(ctx context.Context, e outbox.Entry, intent func() error) error
	close()
}

// openStore opens the outbox the flags name.
func openStore(ctx context.Context, cfg config, log *logger) (store, error) {
	u, err := url.Parse(cfg.store)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		return nil, fmt.Errorf("appender: -store is not a URL (%v); use postgres://..., mysql://..., redis://... or redis+cluster://host:port,host:port", err)
	}
	slogger := slog.New(slog.NewTextHandler(log.w, nil)).With("appender", cfg.name)
	switch u.Scheme {
	case "postgres", "postgresql":
		return openPostgres(ctx, cfg, slogger)
	case "redis", "rediss", "redis+cluster", "rediss+cluster":
		return openRedis(ctx, cfg, u, slogger)
	case "mysql":
		return openMySQL(ctx, cfg, slogger)
	case "":
		return nil, fmt.Errorf("appender: -store %q has no scheme; use postgres://..., mysql://..., redis://... or redis+cluster://host:port,host:port", redact(cfg.store))
	default:
		return nil, fmt.Errorf("appender: -store: unknown scheme %q; use postgres://..., mysql://..., redis://... or redis+cluster://host:port,host:port", u.Scheme)
	}
}

// redact hides a password in a store URL for error messages.
func redact(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return s
}

// pgStore appends with pool.Begin, AppendInTx, tx.Commit.
type pgStore struct {
	pool    *pgxpool.Pool
	b       *pgoutbox.Backend
	timeout time.Duration
}

func openPostgres(ctx context.Context, cfg config, log *slog.Logger) (store, error) {
	pc, err := pgxpool.ParseConfig(cfg.store)
	if err != nil {
		return nil, fmt.Errorf("appender: -store %s: %v", redact(cfg.store), err)
	}
	if pc.ConnConfig.RuntimeParams["application_name"] == "" {
		pc.ConnConfig.RuntimeParams["application_name"] = cfg.name
	}
	if need := int32(cfg.workers + 1); pc.MaxConns < need {
		pc.MaxConns = need
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("appender: -store %s: %v", redact(cfg.store), err)
	}
	octx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	b, err := pgoutbox.New(octx, pool, pgoutbox.Options{Schema: cfg.schema, Table: cfg.table, Logger: log, KeySequence: cfg.keySequence})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("appender: opening the outbox %s.%s at %s: %w", cfg.schema, cfg.table, redact(cfg.store), err)
	}
	return &pgStore{pool: pool, b: b, timeout: cfg.timeout}, nil
}

func (s *pgStore) partitions() int { return s.b.Partitions() }

func (s *pgStore) close() {
	_ = s.b.Close()
	s.pool.Close()
}

func (s *pgStore) appendOne(ctx context.Context, e outbox.Entry, intent func() error) error {
	actx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	tx, err := s.pool.Begin(actx)
	if err != nil {
		return &attemptError{kind: "begin", err: err}
	}
	if err := s.b.AppendInTx(actx, tx, e); err != nil {
		s.rollback(ctx, tx)
		return &attemptError{kind: "append", err: err}
	}
	if err := intent(); err != nil {
		s.rollback(ctx, tx)
		return err
	}
	// The commit is not cut short when ctx ends: a graceful stop waits
	// for its outcome instead of leaving it unknown.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer ccancel()
	err = tx.Commit(cctx)
	switch {
	case err == nil:
		return nil
	case pgRolledBack(err):
		return &attemptError{kind: "commit-rolled-back", err: err}
	default:
		return &attemptError{kind: "commit", unknown: true, err: err}
	}
}

func (s *pgStore) rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = tx.Rollback(rctx) // a broken connection is discarded by the pool
}

// pgRolledBack reports whether a Commit error means the transaction
// certainly did not commit: COMMIT of a failed transaction (a rollback),
// an ERROR-severity server error (the commit failed, the transaction was
// rolled back; anything after the commit record would be a PANIC), or an
// error raised before anything was sent. A FATAL error (such as
// pg_terminate_backend's 57P01) and a lost connection are not: the
// commit may have been done before the session ended.
func pgRolledBack(err error) bool {
	if errors.Is(err, pgx.ErrTxCommitRollback) || pgconn.SafeToRetry(err) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		sev := pe.SeverityUnlocalized
		if sev == "" {
			sev = pe.Severity
		}
		return sev == "ERROR"
	}
	return false
}

// redisStore appends with a TxPipeline holding AppendInTx.
type redisStore struct {
	client  redis.UniversalClient
	b       *redisoutbox.Backend
	timeout time.Duration
}

func openRedis(ctx context.Context, cfg config, u *url.URL, log *slog.Logger) (store, error) {
	var client redis.UniversalClient
	if strings.HasSuffix(u.Scheme, "+cluster") {
		if u.Host == "" {
			return nil, fmt.Errorf("appender: -store %s names no node; write redis+cluster://host:port,host:port,...", redact(cfg.store))
		}
		var addrs []string
		for a := range strings.SplitSeq(u.Host, ",") {
			if a = strings.TrimSpace(a); a != "" {
				addrs = append(addrs, a)
			}
		}
		co := &redis.ClusterOptions{Addrs: addrs}
		if u.User != nil {
			co.Username = u.User.Username()
			co.Password, _ = u.User.Password()
		}
		if u.Path != "" && u.Path != "/" {
			return nil, fmt.Errorf("appender: -store %s: a cluster URL has no database path (%q); Redis Cluster has database 0 only", redact(cfg.store), u.Path)
		}
		if u.Scheme == "rediss+cluster" {
			return nil, fmt.Errorf("appender: -store %s: TLS to a cluster is not supported by the chaos appender; use redis+cluster://", redact(cfg.store))
		}
		client = redis.NewClusterClient(co)
	} else {
		opt, err := redis.ParseURL(cfg.store)
		if err != nil {
			return nil, fmt.Errorf("appender: -store %s: %v", redact(cfg.store), err)
		}
		if opt.PoolSize < cfg.workers+1 {
			opt.PoolSize = cfg.workers + 1
		}
		client = redis.NewClient(opt)
	}
	octx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	b, err := redisoutbox.New(octx, client, redisoutbox.Options{Prefix: cfg.prefix, Logger: log, KeySequence: cfg.keySequence})
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("appender: opening the outbox at prefix %s of %s: %w", cfg.prefix, redact(cfg.store), err)
	}
	return &redisStore{client: client, b: b, timeout: cfg.timeout}, nil
}

func (s *redisStore) partitions() int { return s.b.Partitions() }

func (s *redisStore) close() {
	_ = s.b.Close()
	_ = s.client.Close()
}

func (s *redisStore) appendOne(ctx context.Context, e outbox.Entry, intent func() error) error {
	actx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	pipe := s.client.TxPipeline()
	if err := s.b.AppendInTx(actx, pipe, e); err != nil {
		return &attemptError{kind: "append", err: err}
	}
	if err := intent(); err != nil {
		return err // nothing was sent
	}
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer ccancel()
	cmds, err := pipe.Exec(cctx)
	cerr := redisoutbox.CheckExec(cmds, err)
	switch {
	case cerr == nil:
		return nil
	case redisAborted(cmds, err):
		return &attemptError{kind: "exec-aborted", err: cerr}
	default:
		return &attemptError{kind: "exec", unknown: true, err: cerr}
	}
}

// redisAborted reports whether the transaction certainly did not run: the
// cases redisoutbox.CheckExec reports as "nothing of it was applied" (a
// WATCH conflict, EXECABORT after a command was refused when queued, a
// CROSSSLOT refusal). Everything else, *redisoutbox.ExecError included,
// is treated as unknown.
func redisAborted(cmds []redis.Cmder, err error) bool {
	if errors.Is(err, redis.TxFailedErr) || strings.HasPrefix(err.Error(), "EXECABORT") || strings.HasPrefix(err.Error(), "CROSSSLOT") {
		return true
	}
	for _, c := range cmds {
		if cerr := c.Err(); cerr != nil && strings.HasPrefix(cerr.Error(), "EXECABORT") {
			return true
		}
	}
	return false
}
