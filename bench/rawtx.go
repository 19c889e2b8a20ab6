package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The raw at-least-once Postgres loop (issue 32, item 5). The raw
// claim-and-delete statement of W2 deletes the rows it claims in the
// statement that claims them: a crash between that statement and the
// publish loses the batch. This loop gives the guarantee the outbox
// gives: in one transaction it locks a batch (FOR UPDATE SKIP LOCKED),
// publishes it, deletes it and commits, so a crash or a failed publish
// before the commit leaves every row of the batch in the table.

// rawClaimLock locks up to $1 due rows of the raw table, in claim order,
// skipping rows another transaction holds: the claim of rawClaimDelete
// without its DELETE.
const rawClaimLock = `
SELECT seq, id, key, payload FROM bench_raw.entries
WHERE partition = 0 AND next_at <= now()
ORDER BY next_at, seq
LIMIT $1
FOR UPDATE SKIP LOCKED`

// rawDeleteClaimed deletes the rows a rawClaimLock of the same
// transaction locked, by their bigint key.
const rawDeleteClaimed = `DELETE FROM bench_raw.entries WHERE seq = ANY($1)`

// rawClaimTxSys and rawClaimTxNote label the loop's figure.
const (
	rawClaimTxSys  = "raw SQL at-least-once loop (BEGIN, SELECT … FOR UPDATE SKIP LOCKED, publish, DELETE, COMMIT)"
	rawClaimTxNote = "500/tx, 1 client"
)

// rawBatchSink publishes one claimed batch: the payloads of the rows, in
// claim order. An error rolls the batch's transaction back. It must not
// keep payloads.
type rawBatchSink func(payloads [][]byte) error

// rawPGClaimTx runs one batch of the at-least-once loop on table: BEGIN,
// lock up to limit due rows, publish them to sink, delete them, COMMIT.
// It returns how many rows the batch took (0 when none was due). When
// sink or any statement fails, the transaction is rolled back and every
// row of the batch stays in the table.
func (s *Suite) rawPGClaimTx(ctx context.Context, table string, limit int, sink rawBatchSink) (int, error) {
	lock, del := rawOn(rawClaimLock, table), rawOn(rawDeleteClaimed, table)
	k := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, lock, limit)
		if err != nil {
			return err
		}
		seqs := make([]int64, 0, limit)
		payloads := make([][]byte, 0, limit)
		for rows.Next() {
			var seq int64
			var id, key string
			var p []byte
			if err := rows.Scan(&seq, &id, &key, &p); err != nil {
				rows.Close()
				return err
			}
			seqs = append(seqs, seq)
			payloads = append(payloads, p)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(seqs) == 0 {
			return nil
		}
		if err := sink(payloads); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		tag, err := tx.Exec(ctx, del, seqs)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != int64(len(seqs)) {
			return fmt.Errorf("count wrong: deleted %d of the %d rows the transaction locked", tag.RowsAffected(), len(seqs))
		}
		k = len(seqs)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return k, nil
}

// rawPGDrainTx takes exactly want rows off table with the at-least-once
// loop (500 per transaction, one client), publishing each batch to tr,
// the sink the raw claim-and-delete loop uses, and returns the elapsed
// time.
func (s *Suite) rawPGDrainTx(ctx context.Context, table string, want int, tr *tracker) (time.Duration, error) {
	sink := func(payloads [][]byte) error {
		for _, p := range payloads {
			tr.markPayload(p)
		}
		return nil
	}
	got := 0
	start := time.Now()
	for got < want {
		k, err := s.rawPGClaimTx(ctx, table, min(500, want-got), sink)
		if err != nil {
			return 0, fmt.Errorf("raw at-least-once loop: %w", err)
		}
		if k == 0 {
			return 0, fmt.Errorf("count wrong: the backlog ran dry after %d of %d rows", got, want)
		}
		got += k
	}
	return time.Since(start), nil
}

// rawPostgresClaimTx fills the raw table with msgs again (untimed, 1,000
// rows per INSERT, then ANALYZE, as the raw W4 backlogs are filled) and
// times the at-least-once loop draining it: the drain with the outbox's
// guarantee and nothing else. It adds the run to sr.
func (s *Suite) rawPostgresClaimTx(ctx context.Context, msgs *messages, run int, sr *series) error {
	n := len(msgs.payload)
	table := schemaRaw + ".entries"
	if err := s.resetRawPG(ctx); err != nil {
		return err
	}
	if _, err := s.fillRawPG(ctx, table, msgs); err != nil {
		return fmt.Errorf("raw at-least-once loop: fill: %w", err)
	}
	tr := newTracker(n)
	c0 := readCPU("postgres")
	el, err := s.rawPGDrainTx(ctx, table, n, tr)
	if err != nil {
		return err
	}
	if self, srv, ok := perEntry(c0, readCPU("postgres"), n); ok {
		s.logf("raw postgres at-least-once loop CPU per entry: this process %v, postgres %v, wall %v", self, srv, el/time.Duration(n))
	}
	if err := s.checkRawRows(ctx, table, 0); err != nil {
		return fmt.Errorf("raw at-least-once loop: %w", err)
	}
	c := tr.counts_()
	if err := c.check(false); err != nil {
		s.fail("raw/postgres at-least-once loop run %d: %v", run+1, err)
	}
	sr.add(rate(n, el), &c)
	return nil
}
