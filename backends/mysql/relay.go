package mysqloutbox

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/outboxrelay/outbox"
)

//go:embed queries/*.sql
var relayQueryFS embed.FS

// relayQuery returns the text of queries/name.sql.
func relayQuery(name string) string {
	b, err := relayQueryFS.ReadFile("queries/" + name + ".sql")
	if err != nil {
		panic("mysqloutbox: missing embedded query " + name + ": " + err.Error())
	}
	return string(b)
}

// renderRelay renders a relay statement: the table names, and the index
// names its FORCE INDEX hints use ({due_idx}, {holdback_idx}, {id_uq}),
// which Migrate names after Options.Table as it names the tables.
func (b *Backend) renderRelay(q string) string {
	idx := func(suffix string) string { return "`" + b.opts.Table + suffix + "`" }
	return strings.NewReplacer("{due_idx}", idx("_due_idx"), "{holdback_idx}", idx("_holdback_idx"),
		"{id_uq}", idx("_id_uq")).Replace(b.names.render(q))
}

// relayState is the state of fetching and recording outcomes: the
// statements of the relay's hot path, prepared once per Backend (a
// *sql.Stmt is prepared again on each pool connection it first runs on,
// then runs in one round trip: the driver sends a query with arguments
// that is not prepared as prepare, execute and close).
type relayState struct {
	find, findNext, markSent, markFailed, parkCorrupt *sql.Stmt
	leaseHeld, lockLease, archiveSent                 *sql.Stmt
	// parkedIDs is the text of the query run after a park that changed
	// fewer rows than it was given (rare).
	parkedIDs string
}

// exceptSQL is the condition of FetchNext that leaves out the IDs in
// flight (a JSON array of strings).
const exceptSQL = "AND o.id NOT IN (SELECT x.id FROM JSON_TABLE(?, '$[*]' COLUMNS (" +
	"id VARBINARY(255) PATH '$')) AS x)"

// initRelay prepares fetching and recording outcomes.
func (b *Backend) initRelay(ctx context.Context) error {
	find := relayQuery("find_pending_batch")
	texts := []struct {
		stmt **sql.Stmt
		text string
	}{
		{&b.relay.find, strings.ReplaceAll(find, "{except}", "")},
		{&b.relay.findNext, strings.ReplaceAll(find, "{except}", exceptSQL)},
		{&b.relay.markSent, relayQuery("mark_sent")},
		{&b.relay.markFailed, strings.ReplaceAll(relayQuery("mark_failed"), "{max_history}", strconv.Itoa(outbox.MaxAttemptHistory))},
		{&b.relay.parkCorrupt, relayQuery("park_corrupt")},
		{&b.relay.leaseHeld, relayQuery("lease_held")},
		{&b.relay.lockLease, relayQuery("lock_lease")},
		{&b.relay.archiveSent, relayQuery("archive_sent")},
	}
	for _, s := range texts {
		stmt, err := b.db.PrepareContext(ctx, b.renderRelay(s.text))
		if err != nil {
			b.closeRelay()
			if isMySQLError(err, errBadField) {
				return fmt.Errorf("mysqloutbox: New: the outbox %s has an older layout (a column the relay's statements use is missing): run mysqloutbox.Migrate (or \"outbox migrate up\") to bring it to version %d: %w", b.names.outbox, LatestVersion(), err)
			}
			return fmt.Errorf("mysqloutbox: New: preparing the relay's statements: %w", err)
		}
		*s.stmt = stmt
	}
	b.relay.parkedIDs = b.renderRelay(relayQuery("parked_ids"))
	return nil
}

// closeRelay closes the prepared statements (on every connection they
// were prepared on).
func (b *Backend) closeRelay() {
	for _, s := range []*sql.Stmt{b.relay.find, b.relay.findNext, b.relay.markSent, b.relay.markFailed,
		b.relay.parkCorrupt, b.relay.leaseHeld, b.relay.lockLease, b.relay.archiveSent} {
		if s != nil {
			_ = s.Close()
		}
	}
}

// maxIDsPerStatement bounds the IDs (and failures, and keys) one
// statement takes, as a JSON argument or an IN (...) list: longer
// lists are split into statements of at most this many, each fenced on
// its own. It keeps a statement's JSON argument well under the smallest
// max_allowed_packet the servers ship with (MariaDB 10.6: 16 MiB) even
// for failures with 4,096-byte errors (about 4.5 MB for 1,000).
const maxIDsPerStatement = 1000

// chunks calls fn with consecutive pieces of n items, at most
// maxIDsPerStatement each, and stops at the first error.
func inChunks(n int, fn func(lo, hi int) error) error {
	for lo := 0; lo < n; lo += maxIDsPerStatement {
		if err := fn(lo, min(lo+maxIDsPerStatement, n)); err != nil {
			return err
		}
	}
	return nil
}

// jsonArg encodes v (strings, numbers, arrays of them) as the JSON
// argument of a JSON_TABLE. Strings are valid UTF-8 by then (IDs are
// checked at append, errors cleaned by cleanError); an ID that is not
// would read as another string and match no entry.
func jsonArg(v any) string {
	b, err := json.Marshal(v)
	if err != nil { // only strings, ints and slices of them are passed
		panic("mysqloutbox: encoding a statement argument: " + err.Error())
	}
	return string(b)
}

// uniqueIDs returns ids without repeats, in first-seen order (a repeated
// ID would count twice against the rows a statement changed), and without
// IDs longer than outbox.MaxIDLen bytes, which name no entry (JSON_TABLE
// would cut them to the column's 255 characters, and the cut ID could
// name one).
func uniqueIDs(ids []string) []string {
	seen := make(map[string]struct{}, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if _, ok := seen[id]; !ok && len(id) <= outbox.MaxIDLen {
			seen[id] = struct{}{}
			out = append(out, id)
		}
	}
	return out
}

// leaseArgs are the arguments that fence a statement by lease.
func leaseArgs(l outbox.Lease) []any { return []any{l.Partition, l.Owner, l.Version} }

// fenceLost is the error of a fenced call whose lease no longer holds.
func fenceLost(op string, l outbox.Lease) error {
	return fmt.Errorf("mysqloutbox: %s: partition %d: owner %q no longer holds the lease at version %d (it expired, was taken over or was released): %w",
		op, l.Partition, l.Owner, l.Version, outbox.ErrLeaseLost)
}

// checkLease reports whether lease still holds (queries/lease_held.sql),
// as an error wrapping [outbox.ErrLeaseLost] when it does not.
func (b *Backend) checkLease(ctx context.Context, op string, l outbox.Lease) error {
	var n int
	if err := b.relay.leaseHeld.QueryRowContext(ctx, leaseArgs(l)...).Scan(&n); err != nil {
		return b.relayErr(op, err)
	}
	if n == 0 {
		return fenceLost(op, l)
	}
	return nil
}

// fencedExec runs a fenced multi-table statement that changes at most
// want rows when the lease holds. When it changed fewer (IDs unknown or
// already finished, or the lease lost), one more round trip tells which:
// a lease that no longer holds never holds again, so the check after the
// statement proves whether the lease held while it ran.
func (b *Backend) fencedExec(ctx context.Context, op string, l outbox.Lease, stmt *sql.Stmt, want int, args ...any) error {
	res, err := stmt.ExecContext(ctx, args...)
	if err != nil {
		return b.relayErr(op, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return b.relayErr(op, err)
	}
	if n >= int64(want) {
		return nil
	}
	return b.checkLease(ctx, op, l)
}

// isCtxErr reports whether err is a context's error.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// relayErr is the error of a failed statement of op: context errors as
// they are, [outbox.ErrClosed] when Close closed the statements under a
// call in flight, else the driver's error as errors.go maps it.
func (b *Backend) relayErr(op string, err error) error {
	switch {
	case isCtxErr(err):
		return err
	case b.closed.Load():
		return fmt.Errorf("mysqloutbox: %s: %w (%v)", op, outbox.ErrClosed, err)
	}
	return b.interpretError(op, err)
}
