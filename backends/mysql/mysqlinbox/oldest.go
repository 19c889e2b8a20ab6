package mysqlinbox

import (
	"context"
	"database/sql"
	"time"

	"github.com/outboxrelay/outbox/inbox"
)

var _ inbox.OldestReporter = (*Store)(nil)

// Oldest implements [inbox.OldestReporter] with one query
// (queries/oldest.sql, outside any transaction): the earliest of the
// first entries of applied_at_idx and updated_at_idx, by the database's
// clock (UTC), to the microsecond.
func (s *Store) Oldest(ctx context.Context) (time.Time, bool, error) {
	s.prepare(ctx)
	var us sql.NullInt64
	var err error
	st := s.stmt(qOldest)
	if st != nil {
		err = st.QueryRowContext(ctx).Scan(&us)
	}
	if st == nil || unusableStmt(err) {
		err = s.db.QueryRowContext(ctx, s.text[qOldest]).Scan(&us)
	}
	if err != nil {
		return time.Time{}, false, s.interpretError("Oldest", err)
	}
	if !us.Valid {
		return time.Time{}, false, nil
	}
	return time.UnixMicro(us.Int64), true, nil
}
