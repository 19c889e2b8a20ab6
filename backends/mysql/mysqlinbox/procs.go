package mysqlinbox

import (
	"context"
	"database/sql"
	"maps"
	"time"

	"github.com/outboxrelay/outbox/inbox"
)

// errNoProcedure is ER_SP_DOES_NOT_EXIST: migration 002 is not applied.
const errNoProcedure = 1305

// procsMissing reports whether a call found the procedure of migration
// 002 missing less than retryAfter ago: until then, Finish sends its
// statements one by one without trying the CALL.
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
