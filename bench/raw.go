package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
)

// Callers is the number of concurrent appenders in every append workload.
const Callers = 8

const schemaRaw = "bench_raw"

// rawTableDDL is the table the raw limits use: the columns an outbox row
// needs, with the partial index a claim needs, so a raw INSERT pays for the
// same indexes as an outbox append.
const rawTableDDL = `
CREATE TABLE bench_raw.entries (
	seq        bigserial PRIMARY KEY,
	id         text NOT NULL,
	partition  int NOT NULL DEFAULT 0,
	topic      text NOT NULL,
	key        text NOT NULL,
	payload    bytea NOT NULL,
	headers    jsonb,
	attempts   int NOT NULL DEFAULT 0,
	next_at    timestamptz NOT NULL DEFAULT now(),
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX ON bench_raw.entries (id);
CREATE INDEX ON bench_raw.entries (partition, next_at, seq);
`

const rawInsert = `INSERT INTO bench_raw.entries (id, topic, key, payload) VALUES ($1, 'bench', $2, $3)`

const rawInsertMany = `INSERT INTO bench_raw.entries (id, topic, key, payload)
SELECT i, 'bench', k, p FROM unnest($1::text[], $2::text[], $3::bytea[]) AS u(i, k, p)`

const rawClaimDelete = `
WITH c AS (
	SELECT seq FROM bench_raw.entries
	WHERE partition = 0 AND next_at <= now()
	ORDER BY next_at, seq
	LIMIT $1
	FOR UPDATE SKIP LOCKED
)
DELETE FROM bench_raw.entries e USING c WHERE e.seq = c.seq
RETURNING e.id, e.key, e.payload`

func (s *Suite) resetRawPG(ctx context.Context) error {
	return s.recreateSchema(ctx, schemaRaw, rawTableDDL)
}

// rawPostgres measures what the Postgres server does with no outbox logic:
// the INSERT of the same row per transaction (1 and 100 per tx, 8 callers)
// a one-statement claim-and-delete loop over the same backlog, and the
// at-least-once loop (rawtx.go) over the same messages.
func (s *Suite) rawPostgres(ctx context.Context) error {
	n, n1 := s.cfg.N, s.cfg.N1
	msgs := newMessages(n, 1)
	ins1tx, ins1auto, ins100, drain := s.sr("raw.pg.1tx"), s.sr("raw.pg.1auto"), s.sr("raw.pg.100"), s.sr("raw.pg.drain")
	drainTx := s.sr("raw.pg.draintx")
	for run := range s.thisRun() {
		// 1 per tx: BEGIN; INSERT; COMMIT (what an append in the caller's
		// transaction costs at least).
		if err := s.resetRawPG(ctx); err != nil {
			return err
		}
		el, err := parallel(ctx, Callers, n1, 1, func(ctx context.Context, lo, hi int) error {
			tx, err := s.pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, rawInsert, outbox.NewID(), msgs.keys[lo], msgs.payload[lo]); err != nil {
				return err
			}
			return tx.Commit(ctx)
		})
		if err != nil {
			return fmt.Errorf("raw insert 1/tx: %w", err)
		}
		if err := s.checkRawRows(ctx, schemaRaw+".entries", n1); err != nil {
			return fmt.Errorf("raw insert 1/tx: %w", err)
		}
		ins1tx.add(rate(n1, el), nil)

		// 1 per autocommit statement: one round trip.
		if err := s.resetRawPG(ctx); err != nil {
			return err
		}
		el, err = parallel(ctx, Callers, n1, 1, func(ctx context.Context, lo, hi int) error {
			_, err := s.pool.Exec(ctx, rawInsert, outbox.NewID(), msgs.keys[lo], msgs.payload[lo])
			return err
		})
		if err != nil {
			return fmt.Errorf("raw insert autocommit: %w", err)
		}
		if err := s.checkRawRows(ctx, schemaRaw+".entries", n1); err != nil {
			return fmt.Errorf("raw insert autocommit: %w", err)
		}
		ins1auto.add(rate(n1, el), nil)

		// 100 per tx: one multi-row INSERT from arrays.
		if err := s.resetRawPG(ctx); err != nil {
			return err
		}
		el, err = parallel(ctx, Callers, n, 100, func(ctx context.Context, lo, hi int) error {
			ids := make([]string, hi-lo)
			for i := range ids {
				ids[i] = outbox.NewID()
			}
			return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, rawInsertMany, ids, msgs.keys[lo:hi], msgs.payload[lo:hi])
				return err
			})
		})
		if err != nil {
			return fmt.Errorf("raw insert 100/tx: %w", err)
		}
		if err := s.checkRawRows(ctx, schemaRaw+".entries", n); err != nil {
			return fmt.Errorf("raw insert 100/tx: %w", err)
		}
		ins100.add(rate(n, el), nil)

		// Drain the backlog the 100/tx run left: one client, 500 rows per
		// autocommit claim-and-delete.
		if err := s.analyzeSchema(ctx, schemaRaw); err != nil {
			return fmt.Errorf("raw claim-and-delete: ANALYZE: %w", err)
		}
		tr := newTracker(n)
		c0 := readCPU("postgres")
		if el, err = s.rawPGDrain(ctx, schemaRaw+".entries", n, tr); err != nil {
			return err
		}
		if self, srv, ok := perEntry(c0, readCPU("postgres"), n); ok {
			s.logf("raw postgres drain CPU per entry: this process %v, postgres %v, wall %v", self, srv, el/time.Duration(n))
		}
		if err := s.checkRawRows(ctx, schemaRaw+".entries", 0); err != nil {
			return fmt.Errorf("raw claim-and-delete: %w", err)
		}
		c := tr.counts_()
		if err := c.check(false); err != nil {
			s.fail("raw/postgres claim-and-delete run %d: %v", run+1, err)
		}
		drain.add(rate(n, el), &c)

		// The same drain with the outbox's guarantee: lock, publish,
		// delete and commit per batch (rawtx.go), on the same messages.
		if err := s.rawPostgresClaimTx(ctx, msgs, run, drainTx); err != nil {
			return err
		}
	}
	w1 := fmt.Sprintf("Postgres append, 1 entry/tx, %d callers", Callers)
	s.record("raw.pg.insert1tx", w1, "raw pgx BEGIN+INSERT+COMMIT", "entries/s", true, ins1tx, "")
	s.record("raw.pg.insert1auto", w1, "raw pgx autocommit INSERT", "entries/s", true, ins1auto, "")
	s.record("raw.pg.insert100", fmt.Sprintf("Postgres append, 100 entries/tx, %d callers", Callers), "raw pgx multi-row INSERT", "entries/s", true, ins100, "")
	s.record("raw.pg.claimdelete", s.drainTitle("Postgres", "no-op sink"), "raw SQL claim-and-delete loop", "entries/s", true, drain, "500/stmt, 1 client; deletes on claim: a crash loses the batch")
	s.record("raw.pg.claimtx", s.drainTitle("Postgres", "no-op sink"), rawClaimTxSys, "entries/s", true, drainTx, rawClaimTxNote)
	return nil
}

// checkRawRows checks that table (schema.table) holds want rows.
func (s *Suite) checkRawRows(ctx context.Context, table string, want int) error {
	var got int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&got); err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("count wrong: %d rows in the table, %d appended", got, want)
	}
	return nil
}

// ---- Redis ----

// rawAppendLua is the append of an outbox over Redis at its simplest: the
// entry into a hash, its ID into a sorted set scored by the server's time.
const rawAppendLua = `
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then
	redis.call('ZADD', KEYS[2], ms, ARGV[1])
end
return 1`

// rawClaimLua claims up to ARGV[1] due entries and deletes them in one
// call: the upper bound of a Redis drain (no in-flight bookkeeping).
const rawClaimLua = `
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ms, 'LIMIT', 0, tonumber(ARGV[1]))
if #ids == 0 then return {} end
local vals = redis.call('HMGET', KEYS[1], unpack(ids))
redis.call('ZREM', KEYS[2], unpack(ids))
redis.call('HDEL', KEYS[1], unpack(ids))
return vals`

var (
	rawAppendScript = redis.NewScript(rawAppendLua)
	rawClaimScript  = redis.NewScript(rawClaimLua)
	rawKeys         = []string{"{rawbench}:entries", "{rawbench}:pending"}
)

// rawRedis measures the Redis server with no outbox logic: the append
// script called by 8 callers (one call per round trip, and 100 calls
// pipelined per round trip), and a claim-and-delete script loop.
func (s *Suite) rawRedis(ctx context.Context) error {
	n, n1 := s.cfg.N, s.cfg.N1
	msgs := newMessages(n, 2)
	if err := rawAppendScript.Load(ctx, s.rdb).Err(); err != nil {
		return err
	}
	if err := rawClaimScript.Load(ctx, s.rdb).Err(); err != nil {
		return err
	}
	app1, app1tx, app100, drain := s.sr("raw.r.1"), s.sr("raw.r.1tx"), s.sr("raw.r.100"), s.sr("raw.r.drain")
	for run := range s.thisRun() {
		if err := deleteKeys(ctx, s.rdb, "{rawbench}*"); err != nil {
			return err
		}
		el, err := parallel(ctx, Callers, n1, 1, func(ctx context.Context, lo, hi int) error {
			return s.rdb.EvalSha(ctx, rawAppendScript.Hash(), rawKeys, outbox.NewID(), msgs.payload[lo]).Err()
		})
		if err != nil {
			return fmt.Errorf("raw EVALSHA append: %w", err)
		}
		if err := s.checkRawRedis(ctx, rawKeys, n1); err != nil {
			return fmt.Errorf("raw EVALSHA append: %w", err)
		}
		app1.add(rate(n1, el), nil)

		// The same script inside MULTI/EXEC: what an append inside the
		// caller's transaction costs at least (ours is AppendInTx in a
		// TxPipelined, also one MULTI/EXEC per entry).
		if err := deleteKeys(ctx, s.rdb, "{rawbench}*"); err != nil {
			return err
		}
		el, err = parallel(ctx, Callers, n1, 1, func(ctx context.Context, lo, hi int) error {
			_, err := s.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
				pipe.EvalSha(ctx, rawAppendScript.Hash(), rawKeys, outbox.NewID(), msgs.payload[lo])
				return nil
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("raw MULTI+EVALSHA append: %w", err)
		}
		if err := s.checkRawRedis(ctx, rawKeys, n1); err != nil {
			return fmt.Errorf("raw MULTI+EVALSHA append: %w", err)
		}
		app1tx.add(rate(n1, el), nil)

		if err := deleteKeys(ctx, s.rdb, "{rawbench}*"); err != nil {
			return err
		}
		el, err = parallel(ctx, Callers, n, 100, func(ctx context.Context, lo, hi int) error {
			pipe := s.rdb.Pipeline()
			for i := lo; i < hi; i++ {
				pipe.EvalSha(ctx, rawAppendScript.Hash(), rawKeys, outbox.NewID(), msgs.payload[i])
			}
			_, err := pipe.Exec(ctx)
			return err
		})
		if err != nil {
			return fmt.Errorf("raw pipelined EVALSHA append: %w", err)
		}
		if err := s.checkRawRedis(ctx, rawKeys, n); err != nil {
			return fmt.Errorf("raw pipelined EVALSHA append: %w", err)
		}
		app100.add(rate(n, el), nil)

		tr := newTracker(n)
		c0 := readCPU("redis-server")
		if el, err = s.rawRedisDrain(ctx, rawKeys, n, tr); err != nil {
			return err
		}
		if self, srv, ok := perEntry(c0, readCPU("redis-server"), n); ok {
			s.logf("raw redis drain CPU per entry: this process %v, redis-server %v, wall %v", self, srv, el/time.Duration(n))
		}
		if err := s.checkRawRedis(ctx, rawKeys, 0); err != nil {
			return fmt.Errorf("raw claim-and-delete: %w", err)
		}
		c := tr.counts_()
		if err := c.check(false); err != nil {
			s.fail("raw/redis claim-and-delete run %d: %v", run+1, err)
		}
		drain.add(rate(n, el), &c)
	}
	if err := deleteKeys(ctx, s.rdb, "{rawbench}*"); err != nil {
		return err
	}
	s.record("raw.redis.append1", fmt.Sprintf("Redis append, 1 entry/tx, %d callers", Callers), "raw EVALSHA append, 1 per round trip", "entries/s", true, app1, "")
	s.record("raw.redis.append1tx", fmt.Sprintf("Redis append, 1 entry/tx, %d callers", Callers), "raw MULTI+EVALSHA+EXEC append", "entries/s", true, app1tx, "")
	s.record("raw.redis.append100", fmt.Sprintf("Redis append, 100 entries/tx, %d callers", Callers), "raw EVALSHA append, 100 pipelined", "entries/s", true, app100, "")
	s.record("raw.redis.claimdelete", s.drainTitle("Redis", "no-op sink"), "raw claim-and-delete script loop", "entries/s", true, drain, "500/call, 1 client")
	return nil
}

// checkRawRedis checks that keys (the entries hash and the pending set)
// hold want entries.
func (s *Suite) checkRawRedis(ctx context.Context, keys []string, want int) error {
	h, err := s.rdb.HLen(ctx, keys[0]).Result()
	if err != nil {
		return err
	}
	z, err := s.rdb.ZCard(ctx, keys[1]).Result()
	if err != nil {
		return err
	}
	if h != int64(want) || z != int64(want) {
		return fmt.Errorf("count wrong: %d entries and %d pending after %d appends", h, z, want)
	}
	return nil
}
