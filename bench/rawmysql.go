package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox"
)

// The raw MySQL limits: the same row as an outbox row (the columns an
// entry needs, the id unique index and the due index a claim walks),
// inserted with plain INSERTs in the same transaction shapes as our
// appends, and drained by an at-least-once loop with no outbox logic:
// BEGIN; SELECT … FOR UPDATE SKIP LOCKED LIMIT 500; publish to the
// counting sink; DELETE the claimed rows; COMMIT.

const rawMySQLTable = "raw_entries"

// rawMySQLDDL is the raw table; {t} is its name.
const rawMySQLDDL = "CREATE TABLE {t} (" +
	"seq BIGINT NOT NULL AUTO_INCREMENT, " +
	"id VARCHAR(255) NOT NULL, " +
	"`partition` INT NOT NULL, " +
	"topic VARCHAR(255) NOT NULL, " +
	"`key` VARBINARY(4096) NOT NULL, " +
	"payload LONGBLOB, " +
	"headers MEDIUMBLOB, " +
	"attempts INT NOT NULL DEFAULT 0, " +
	"next_at DATETIME(6) NOT NULL, " +
	"created_at DATETIME(6) NOT NULL, " +
	"PRIMARY KEY (seq), " +
	"UNIQUE KEY (id), " +
	"KEY (`partition`, next_at, seq)" +
	") ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin"

// rawMySQLInsert returns the INSERT of k rows into table: the times are
// the server's clock, as an append stores them.
func rawMySQLInsert(table string, k int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + table + " (id, `partition`, topic, `key`, payload, next_at, created_at) VALUES ")
	for i := range k {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, 'bench', ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))")
	}
	return b.String()
}

// rawMySQLArgs are the arguments of rawMySQLInsert for messages lo..hi-1,
// each in partition keyLane(key, parts), so the rows of a key share a
// partition as an outbox's do.
func rawMySQLArgs(m *messages, lo, hi, parts int) []any {
	args := make([]any, 0, 4*(hi-lo))
	for i := lo; i < hi; i++ {
		args = append(args, outbox.NewID(), keyLane(m.keys[i], parts), m.keys[i], m.payload[i])
	}
	return args
}

func (c *mysqlConn) resetRaw(ctx context.Context, table string) error {
	if _, err := c.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
		return err
	}
	_, err := c.db.ExecContext(ctx, strings.ReplaceAll(rawMySQLDDL, "{t}", table))
	return err
}

// inTx runs fn in a transaction of db and commits it.
func inTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// rawMySQL measures what the MySQL server does with no outbox logic: the
// INSERT of the same row, 1 and 100 per transaction, 8 callers, and the
// at-least-once claim loop over the backlog the 100-per-transaction run
// left (8 partitions): one client per partition, and one client for all.
func (s *Suite) rawMySQL(ctx context.Context, c *mysqlConn) error {
	n, n1 := s.cfg.N, s.cfg.N1
	msgs := newMessages(n, 21)
	ins1, ins100 := s.sr("raw.my.1tx"), s.sr("raw.my.100")
	drain8, drain1 := s.sr("raw.my.drain8"), s.sr("raw.my.drain1")
	t := rawMySQLTable
	one, hundred := rawMySQLInsert(t, 1), rawMySQLInsert(t, 100)
	for run := range s.thisRun() {
		if err := c.resetRaw(ctx, t); err != nil {
			return err
		}
		el, err := parallel(ctx, Callers, n1, 1, func(ctx context.Context, lo, hi int) error {
			return inTx(ctx, c.db, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, one, rawMySQLArgs(msgs, lo, hi, mysqlPartitions)...)
				return err
			})
		})
		if err == nil {
			err = c.expectRows(ctx, t, n1)
		}
		if err != nil {
			return fmt.Errorf("raw insert 1/tx: %w", err)
		}
		ins1.add(rate(n1, el), nil)

		// 100 per transaction: one multi-row INSERT (the last chunk of
		// an N that 100 does not divide gets its own statement).
		if err := c.resetRaw(ctx, t); err != nil {
			return err
		}
		el, err = parallel(ctx, Callers, n, 100, func(ctx context.Context, lo, hi int) error {
			q := hundred
			if hi-lo != 100 {
				q = rawMySQLInsert(t, hi-lo)
			}
			return inTx(ctx, c.db, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, q, rawMySQLArgs(msgs, lo, hi, mysqlPartitions)...)
				return err
			})
		})
		if err == nil {
			err = c.expectRows(ctx, t, n)
		}
		if err == nil {
			err = c.analyze(ctx, c.db, t) // untimed: the drain's plan
		}
		if err != nil {
			return fmt.Errorf("raw insert 100/tx: %w", err)
		}
		ins100.add(rate(n, el), nil)

		// The claim loop, one client per partition, on that backlog;
		// then one client for all partitions on a refill.
		for _, clients := range []int{mysqlPartitions, 1} {
			if clients == 1 {
				if err := c.resetRaw(ctx, t); err != nil {
					return err
				}
				if _, err := c.fillRaw(ctx, t, msgs, mysqlPartitions); err != nil {
					return err
				}
			}
			s.mysqlSettle(ctx, c)
			tr := newTracker(n)
			c0 := readCPU("mariadbd")
			el, err := c.rawDrain(ctx, t, clients, n, tr)
			if err != nil {
				return fmt.Errorf("raw claim loop, %d client(s): %w", clients, err)
			}
			if self, srv, ok := perEntry(c0, readCPU("mariadbd"), n); ok {
				s.logf("raw mysql claim loop (%d clients) CPU per entry: this process %v, mariadbd %v, wall %v", clients, self, srv, el/time.Duration(n))
			}
			if err := c.expectRows(ctx, t, 0); err != nil {
				return fmt.Errorf("raw claim loop: %w", err)
			}
			cn := tr.counts_()
			if cn.Duplicates > 0 {
				s.logf("raw/mysql claim loop, %d client(s): %d duplicates (deadlocks retried)", clients, cn.Duplicates)
			}
			if err := cn.check(true); err != nil {
				s.fail("raw/mysql claim loop, %d client(s), run %d: %v", clients, run+1, err)
			}
			map[int]*series{mysqlPartitions: drain8, 1: drain1}[clients].add(rate(n, el), &cn)
		}
	}
	if _, err := c.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
		return err
	}
	w1 := fmt.Sprintf("MySQL append, 1 entry/tx, %d callers", Callers)
	s.record("raw.my.insert1tx", w1, "raw database/sql BEGIN+INSERT+COMMIT", "entries/s", true, ins1, "")
	s.record("raw.my.insert100", fmt.Sprintf("MySQL append, 100 entries/tx, %d callers", Callers), "raw database/sql multi-row INSERT", "entries/s", true, ins100, "")
	s.record("raw.my.claim8", s.drainTitle("MySQL", "no-op sink"), "raw SKIP LOCKED claim loop, 1 client per partition", "entries/s", true, drain8,
		fmt.Sprintf("%d partitions, %d clients, 500/claim", mysqlPartitions, mysqlPartitions))
	s.record("raw.my.claim1", s.drainTitle("MySQL", "no-op sink"), "raw SKIP LOCKED claim loop, 1 client", "entries/s", true, drain1,
		fmt.Sprintf("%d partitions one after the other, 500/claim", mysqlPartitions))
	return nil
}

// fillRaw inserts the messages into table over parts partitions, 1,000
// rows per multi-row INSERT, with 8 callers, checks the row count and
// analyzes the table (untimed).
func (c *mysqlConn) fillRaw(ctx context.Context, table string, m *messages, parts int) (time.Duration, error) {
	n := len(m.payload)
	el, err := parallel(ctx, Callers, n, 1000, func(ctx context.Context, lo, hi int) error {
		_, err := c.db.ExecContext(ctx, rawMySQLInsert(table, hi-lo), rawMySQLArgs(m, lo, hi, parts)...)
		return err
	})
	if err != nil {
		return el, err
	}
	if err := c.expectRows(ctx, table, n); err != nil {
		return el, err
	}
	return el, c.analyze(ctx, c.db, table)
}

// rawDrain takes exactly want rows off table with the at-least-once claim
// loop: clients clients, client i claiming the partitions p with
// p mod clients = i one after the other, 500 rows per claim, each claim a transaction
// (SELECT … FOR UPDATE SKIP LOCKED, publish to tr, DELETE, COMMIT), until
// want rows were taken. A claim can come back empty while its partition
// still holds rows (SKIP LOCKED passes over a row a neighbouring client's
// scan holds for a moment), so an empty claim ends nothing: the loop ends
// when want rows were taken, or fails when none came for stallTimeout.
func (c *mysqlConn) rawDrain(ctx context.Context, table string, clients, want int, tr *tracker) (time.Duration, error) {
	claim := "SELECT seq, `key`, payload FROM " + table +
		" WHERE `partition` = ? AND next_at <= UTC_TIMESTAMP(6) ORDER BY next_at, seq LIMIT 500 FOR UPDATE SKIP LOCKED"
	var got, lastAt atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, clients)
	start := time.Now()
	lastAt.Store(start.UnixNano())
	for i := range clients {
		wg.Go(func() {
			for p := i; got.Load() < int64(want) && ctx.Err() == nil; {
				k, err := c.claimOnce(ctx, claim, table, p, tr)
				if err != nil {
					errs[i] = err
					return
				}
				if k > 0 {
					got.Add(int64(k))
					lastAt.Store(time.Now().UnixNano())
					continue // the same partition again while it gives
				}
				if time.Since(time.Unix(0, lastAt.Load())) > stallTimeout {
					errs[i] = fmt.Errorf("count wrong: no row for %s after %d of %d", stallTimeout, got.Load(), want)
					return
				}
				if p += clients; p >= mysqlPartitions {
					p = i
					time.Sleep(time.Millisecond) // every partition of this client came back empty
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	for _, err := range append(errs, ctx.Err()) {
		if err != nil {
			return el, err
		}
	}
	if g := got.Load(); g != int64(want) {
		return el, fmt.Errorf("count wrong: the claim loop took %d rows, want %d", g, want)
	}
	return el, nil
}

// claimOnce is one claim of the loop on partition p: it returns how many
// rows it published and deleted. The transaction is READ COMMITTED: under
// REPEATABLE READ (InnoDB's default) a claim that reaches the end of its
// partition takes a next-key lock on the first row of the next one, and
// the clients of neighbouring partitions deadlock. A deadlock that
// happens anyway is retried (what was published is published again: at
// least once).
func (c *mysqlConn) claimOnce(ctx context.Context, claim, table string, p int, tr *tracker) (int, error) {
	for {
		k, err := c.claimTx(ctx, claim, table, p, tr)
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205) {
			continue
		}
		return k, err
	}
}

func (c *mysqlConn) claimTx(ctx context.Context, claim, table string, p int, tr *tracker) (int, error) {
	tx, err := c.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, claim, p)
	if err != nil {
		return 0, err
	}
	var seqs []any
	for rows.Next() {
		var seq int64
		var key, body []byte // key read as an outbox fetch reads it
		if err := rows.Scan(&seq, &key, &body); err != nil {
			rows.Close()
			return 0, err
		}
		// The raw appends are not key-affine (8 callers take chunks of
		// consecutive messages), so a key has no append order to check.
		tr.markPayload(body)
		seqs = append(seqs, seq)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(seqs) == 0 {
		return 0, tx.Commit()
	}
	del := "DELETE FROM " + table + " WHERE seq IN (?" + strings.Repeat(", ?", len(seqs)-1) + ")"
	if _, err := tx.ExecContext(ctx, del, seqs...); err != nil {
		return 0, err
	}
	return len(seqs), tx.Commit()
}

// rawMySQLBacklog is W4 on raw MySQL: the claim loop, one client on one
// partition, draining SmallBack rows per round off a BigBack backlog and
// off a fresh SmallBack one.
func (s *Suite) rawMySQLBacklog(ctx context.Context, c *mysqlConn) error {
	table := func(big bool) string {
		if big {
			return "raw_w4big"
		}
		return "raw_w4small"
	}
	claim := func(t string) string {
		return "SELECT seq, `key`, payload FROM " + t +
			" WHERE `partition` = ? AND next_at <= UTC_TIMESTAMP(6) ORDER BY next_at, seq LIMIT 500 FOR UPDATE SKIP LOCKED"
	}
	return s.rawBacklogW4(ctx, rawBacklogOps{
		name: "raw/mysql", key: "my", title: "MySQL",
		sys: "raw SKIP LOCKED claim loop", note: "500/claim, 1 client", seed: 23,
		reset: func(ctx context.Context, big bool) error { return c.resetRaw(ctx, table(big)) },
		fill: func(ctx context.Context, big bool, m *messages) (time.Duration, error) {
			// One partition: W4 drains partition 0, as ours does.
			return c.fillRaw(ctx, table(big), m, 1)
		},
		drain: func(ctx context.Context, big bool, want int, tr *tracker) (time.Duration, error) {
			got := 0
			start := time.Now()
			for got < want {
				k, err := c.claimOnce(ctx, claim(table(big)), table(big), 0, tr)
				if err != nil {
					return 0, err
				}
				if k == 0 {
					return 0, fmt.Errorf("count wrong: the backlog ran dry after %d of %d rows", got, want)
				}
				got += k
			}
			return time.Since(start), nil
		},
		left: func(ctx context.Context, big bool, want int) error { return c.expectRows(ctx, table(big), want) },
	})
}
