package mysqlinbox

import (
	"context"
	"database/sql"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/outboxrelay/outbox/inbox"
)

// errNoProcedure is ER_SP_DOES_NOT_EXIST: migration 002 is not applied.
const errNoProcedure = 1305

// procsMissing reports whether a call found the procedures of migration
// 002 missing less than retryAfter ago: until then, RecordWithKeySeqs
// and Finish send their statements one by one without trying the CALL.
func (s *Store) procsMissing() bool {
	at := s.noProcs.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < s.retryAfter
}

// noProcedure notes that err is the server's missing procedure (and so
// that the CALL changed nothing).
func (s *Store) noProcedure(err error) bool {
	if !isMySQLError(err, errNoProcedure) {
		return false
	}
	s.noProcs.Store(time.Now().UnixNano())
	return true
}

// RecordWithKeySeqs is Record(ids) then KeySeqs(keys) in tx, with the same
// answers and the same guards (see [Store.Record], [Store.KeySeqs]), in
// one round trip: one CALL of the procedure migration 002 creates, which
// returns both answers as two result sets. Without the procedure (an
// inbox migrated to version 1 only), or for more than 1,000 IDs or keys,
// it sends Record's and KeySeqs' statements one by one. inbox.Inbox uses
// it when the store has it (inbox.KeyRecorder).
func (s *Store) RecordWithKeySeqs(ctx context.Context, tx *sql.Tx, ids, keys []string) ([]bool, map[string]int64, error) {
	if len(ids) == 0 || len(keys) == 0 || s.procsMissing() {
		return s.recordThenKeySeqs(ctx, tx, ids, keys)
	}
	if tx == nil {
		return nil, nil, errNilTx("RecordWithKeySeqs")
	}
	first, uniq, err := planIDs("RecordWithKeySeqs", ids)
	if err != nil {
		return nil, nil, err
	}
	refs, err := keyRefs("RecordWithKeySeqs", slices.Values(keys))
	if err != nil {
		return nil, nil, err
	}
	if len(uniq) > maxPerStatement || len(refs) > maxPerStatement {
		return s.recordThenKeySeqs(ctx, tx, ids, keys)
	}
	fresh := make([]bool, len(ids))
	seqs := make(map[string]int64, len(refs))
	err = s.callRecordWithKeySeqs(ctx, tx, uniq, refs, func(id string) { fresh[first[id]] = true }, seqs)
	if s.noProcedure(err) {
		return s.recordThenKeySeqs(ctx, tx, ids, keys)
	}
	if err != nil {
		return nil, nil, s.interpretError("RecordWithKeySeqs", err)
	}
	return fresh, seqs, nil
}

func (s *Store) recordThenKeySeqs(ctx context.Context, tx *sql.Tx, ids, keys []string) ([]bool, map[string]int64, error) {
	fresh, err := s.Record(ctx, tx, ids)
	if err != nil {
		return nil, nil, err
	}
	seqs, err := s.KeySeqs(ctx, tx, keys)
	if err != nil {
		return nil, nil, err
	}
	return fresh, seqs, nil
}

// callRecordWithKeySeqs runs the procedure and reads its two result sets:
// mine gets each ID the call inserted, seqs the numbers of the keys.
func (s *Store) callRecordWithKeySeqs(ctx context.Context, tx *sql.Tx, ids []string, refs []keyRef, mine func(string), seqs map[string]int64) error {
	tok := rand.Int64N(math.MaxInt64) + 1
	rows, err := s.query(ctx, tx, qRecordWithKeySeqs, tok, hexArray(ids), keyArray(refs, nil))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id []byte
		if err := rows.Scan(&id); err != nil {
			return err
		}
		mine(string(id))
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if !rows.NextResultSet() {
		if err := rows.Err(); err != nil {
			return err
		}
		return errMissingResult
	}
	byHash := make(map[[32]byte]string, len(refs))
	for _, r := range refs {
		byHash[r.hash] = r.key
	}
	for rows.Next() {
		var h []byte
		var seq sql.NullInt64
		if err := rows.Scan(&h, &seq); err != nil {
			return err
		}
		if seq.Valid {
			var hash [32]byte
			copy(hash[:], h)
			seqs[byHash[hash]] = seq.Int64
		}
	}
	return rows.Err()
}

// errMissingResult: the procedure returned fewer result sets than it
// should (a procedure of another version).
var errMissingResult = errorString("the procedure returned no keys: run mysqlinbox.Migrate to bring its procedures up to date")

type errorString string

func (e errorString) Error() string { return string(e) }

// Finish is SetKeySeqs(seqs) then SaveOffsets(offsets) in tx (see
// [Store.SetKeySeqs], [Store.SaveOffsets]; either may be empty), in one
// round trip: one CALL of the procedure migration 002 creates. Without
// the procedure, or for more than 1,000 keys or partitions, it sends the
// two upserts one by one. inbox.Inbox uses it when the store has it
// (inbox.Finisher).
func (s *Store) Finish(ctx context.Context, tx *sql.Tx, seqs map[string]int64, offsets []inbox.Offset) error {
	if len(seqs) == 0 || len(offsets) == 0 || s.procsMissing() {
		return s.setThenSave(ctx, tx, seqs, offsets)
	}
	if tx == nil {
		return errNilTx("Finish")
	}
	refs, err := keyRefs("Finish", maps.Keys(seqs))
	if err != nil {
		return err
	}
	parts, err := planOffsets("Finish", offsets)
	if err != nil {
		return err
	}
	if len(refs) > maxPerStatement || len(parts) > maxPerStatement {
		return s.setThenSave(ctx, tx, seqs, offsets)
	}
	_, err = s.exec(ctx, tx, qFinish, keyArray(refs, seqs), offsetArray(parts))
	if s.noProcedure(err) {
		return s.setThenSave(ctx, tx, seqs, offsets)
	}
	return s.interpretError("Finish", err)
}

func (s *Store) setThenSave(ctx context.Context, tx *sql.Tx, seqs map[string]int64, offsets []inbox.Offset) error {
	if err := s.SetKeySeqs(ctx, tx, seqs); err != nil {
		return err
	}
	return s.SaveOffsets(ctx, tx, offsets)
}
