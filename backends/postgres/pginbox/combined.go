package pginbox

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox/inbox"
)

// The optional interfaces the Inbox probes a store for (KeyRecorder,
// Finisher): two methods' statements in one round trip, which halves the
// round trips of a transaction whose messages carry key sequence numbers
// and offsets (four become two).

// recordWithKeySeqsRow is one row of queries/record_with_key_seqs.sql.
type recordWithKeySeqsRow struct {
	kind string
	ord  *int64
	key  *string
	seq  *int64
}

// checkRecordWithKeySeqs checks the arguments of RecordWithKeySeqs.
func checkRecordWithKeySeqs(ids, keys []string) error {
	if err := checkText("RecordWithKeySeqs", "ID", ids, false); err != nil {
		return err
	}
	return checkText("RecordWithKeySeqs", "key", keys, true)
}

// recordWithKeySeqsAnswer turns the rows into Record's answers (nil for
// no ids) and KeySeqs' map.
func recordWithKeySeqsAnswer(n int, rows []recordWithKeySeqsRow) ([]bool, map[string]int64) {
	var positions []int64
	seqs := map[string]int64{}
	for _, r := range rows {
		switch {
		case r.kind == "r" && r.ord != nil:
			positions = append(positions, *r.ord)
		case r.kind == "k" && r.key != nil && r.seq != nil:
			seqs[*r.key] = *r.seq
		}
	}
	if n == 0 {
		return nil, seqs
	}
	return recordAnswer(n, positions), seqs
}

// checkFinish checks the arguments of Finish.
func checkFinish(keys []string, c offsetColumns) error {
	if err := checkText("Finish", "key", keys, true); err != nil {
		return err
	}
	if err := checkText("Finish", "consumer group", c.groups, true); err != nil {
		return err
	}
	return checkText("Finish", "topic", c.topics, true)
}

// RecordWithKeySeqs is [Store.Record] of ids followed by [Store.KeySeqs]
// of keys, with the same answers, guards and errors, in one statement
// (queries/record_with_key_seqs.sql): the Inbox's optional KeyRecorder
// interface. keys may repeat. No ids returns no answers; no keys returns
// an empty map; neither makes no round trip.
func (s *Store) RecordWithKeySeqs(ctx context.Context, tx pgx.Tx, ids, keys []string) ([]bool, map[string]int64, error) {
	if len(ids) == 0 && len(keys) == 0 {
		return nil, map[string]int64{}, nil
	}
	if tx == nil {
		return nil, nil, errNilTx("RecordWithKeySeqs")
	}
	if err := checkRecordWithKeySeqs(ids, keys); err != nil {
		return nil, nil, err
	}
	rows, err := tx.Query(ctx, s.q.recordWithKeySeqs, ids, keys)
	if err != nil {
		return nil, nil, interpretError(ctx, "RecordWithKeySeqs", err)
	}
	var got []recordWithKeySeqsRow
	var r recordWithKeySeqsRow
	if _, err := pgx.ForEachRow(rows, []any{&r.kind, &r.ord, &r.key, &r.seq}, func() error {
		got = append(got, r)
		return nil
	}); err != nil {
		return nil, nil, interpretError(ctx, "RecordWithKeySeqs", err)
	}
	fresh, seqs := recordWithKeySeqsAnswer(len(ids), got)
	return fresh, seqs, nil
}

// Finish is [Store.SetKeySeqs] of seqs followed by [Store.SaveOffsets] of
// offsets, with the same effects, in one statement (queries/finish.sql):
// the Inbox's optional Finisher interface. Either may be empty; both
// empty does nothing and makes no round trip.
func (s *Store) Finish(ctx context.Context, tx pgx.Tx, seqs map[string]int64, offsets []inbox.Offset) error {
	if len(seqs) == 0 && len(offsets) == 0 {
		return nil
	}
	if tx == nil {
		return errNilTx("Finish")
	}
	keys, vals := sortedSeqs(seqs)
	c := newOffsetColumns(offsets)
	if err := checkFinish(keys, c); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, s.q.finish, keys, vals, c.groups, c.topics, c.parts, c.nexts); err != nil {
		return interpretError(ctx, "Finish", err)
	}
	return nil
}

// RecordWithKeySeqs is [SQLStore.Record] followed by
// [SQLStore.KeySeqs] in one statement, as [Store.RecordWithKeySeqs].
func (s *SQLStore) RecordWithKeySeqs(ctx context.Context, tx *sql.Tx, ids, keys []string) ([]bool, map[string]int64, error) {
	if len(ids) == 0 && len(keys) == 0 {
		return nil, map[string]int64{}, nil
	}
	if tx == nil {
		return nil, nil, errNilTx("RecordWithKeySeqs")
	}
	if err := checkRecordWithKeySeqs(ids, keys); err != nil {
		return nil, nil, err
	}
	rows, err := tx.QueryContext(ctx, s.q.recordWithKeySeqs, textArray(ids), textArray(keys))
	if err != nil {
		return nil, nil, interpretError(ctx, "RecordWithKeySeqs", err)
	}
	var got []recordWithKeySeqsRow
	err = scanRows(rows, func() error {
		var r recordWithKeySeqsRow
		err := rows.Scan(&r.kind, &r.ord, &r.key, &r.seq)
		got = append(got, r)
		return err
	})
	if err != nil {
		return nil, nil, interpretError(ctx, "RecordWithKeySeqs", err)
	}
	fresh, seqs := recordWithKeySeqsAnswer(len(ids), got)
	return fresh, seqs, nil
}

// Finish is [SQLStore.SetKeySeqs] followed by [SQLStore.SaveOffsets] in
// one statement, as [Store.Finish].
func (s *SQLStore) Finish(ctx context.Context, tx *sql.Tx, seqs map[string]int64, offsets []inbox.Offset) error {
	if len(seqs) == 0 && len(offsets) == 0 {
		return nil
	}
	if tx == nil {
		return errNilTx("Finish")
	}
	keys, vals := sortedSeqs(seqs)
	c := newOffsetColumns(offsets)
	if err := checkFinish(keys, c); err != nil {
		return err
	}
	parts := make([]int64, len(c.parts))
	for i, p := range c.parts {
		parts[i] = int64(p)
	}
	if _, err := tx.ExecContext(ctx, s.q.finish, textArray(keys), intArray(vals), textArray(c.groups), textArray(c.topics), intArray(parts), intArray(c.nexts)); err != nil {
		return interpretError(ctx, "Finish", err)
	}
	return nil
}
