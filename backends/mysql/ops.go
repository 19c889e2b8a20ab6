package mysqloutbox

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/outboxrelay/outbox/internal/sqlrow"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxrelay/outbox"
)

// This file holds what the operator interfaces (inspect.go, operate.go)
// and the move interfaces (move.go) share: the columns an entry is
// reported with, the check of a stored row that no relay can publish, the
// attempt history's JSON, and the mapping of their errors.

// Compile-time checks of the operator and move interfaces.
var (
	_ outbox.Canceler           = (*Backend)(nil)
	_ outbox.Inspector          = (*Backend)(nil)
	_ outbox.PartitionInspector = (*Backend)(nil)
	_ outbox.Looker             = (*Backend)(nil)
	_ outbox.Lister             = (*Backend)(nil)
	_ outbox.Pauser             = (*Backend)(nil)
	_ outbox.Exporter           = (*Backend)(nil)
	_ outbox.Importer           = (*Backend)(nil)
	_ outbox.Holder             = (*Backend)(nil)
	_ outbox.Sealer             = (*Backend)(nil)
)

// opsQueries are the statements of the operator and move interfaces,
// one file each, named after the method they serve.
//
//go:embed queries
var opsQueries embed.FS

// opsState is the state of the operator and move interfaces: their
// rendered statements.
type opsState struct {
	qCancel, qStats, qParked, qLookup                   string
	qRequeueCheck, qRequeueMark, qRequeueCopy           string
	qRequeueDrop                                        string
	qPartitionStats, qBlockedCounts, qBlockedKeys       string
	qEntries                                            [len(entryStates)]string
	qPauseTopic, qResumeTopic                           string
	qPausePart, qResumePart, qPaused                    string
	qExport, qExportLease                               string
	qRemoveLease, qRemoveExported                       string
	qImportSeq, qImportBump, qImport, qImportCount      string
	qHold, qUnhold, qHoldState, qSeal, qUnseal, qSealed string
	// retention are the statements of retention.go and health.go.
	retention retentionQueries
}

// initOps renders the statements of the operator and move interfaces.
func (b *Backend) initOps(ctx context.Context) error {
	q := b.opsQuery
	o := &b.ops
	o.qCancel, o.qStats, o.qParked, o.qLookup = q("cancel"), q("stats"), q("parked"), q("lookup")
	o.qRequeueCheck, o.qRequeueMark = q("requeue_check"), q("requeue_mark")
	o.qRequeueCopy, o.qRequeueDrop = q("requeue_copy"), q("requeue_drop")
	o.qPartitionStats, o.qBlockedCounts, o.qBlockedKeys = q("partition_stats"), q("blocked_counts"), q("blocked_keys")
	for i, cond := range stateConds {
		o.qEntries[i] = strings.ReplaceAll(q("entries"), "{state}", cond)
	}
	o.qPauseTopic, o.qResumeTopic = q("pause_topic"), q("resume_topic")
	o.qPausePart, o.qResumePart, o.qPaused = q("pause_partition"), q("resume_partition"), q("paused")
	o.qExport, o.qExportLease = q("export_batch"), q("export_lease")
	o.qRemoveLease, o.qRemoveExported = q("remove_exported_lease"), q("remove_exported")
	o.qImportSeq, o.qImportBump, o.qImport, o.qImportCount = q("import_seq"), q("import_bump"), q("import"), q("import_count")
	o.qHold, o.qUnhold, o.qHoldState = q("hold"), q("unhold"), q("hold_state")
	o.qSeal, o.qUnseal, o.qSealed = q("seal"), q("unseal"), q("sealed")
	b.initRetention()
	return nil
}

// opsQuery is the statement of queries/name.sql without its comment
// lines, its table names and shared parts ({entry_columns},
// {blocked_heads}, {fold}) filled in.
func (b *Backend) opsQuery(name string) string {
	raw, err := opsQueries.ReadFile("queries/" + name + ".sql")
	if err != nil {
		panic("mysqloutbox: missing embedded query " + name + ": " + err.Error())
	}
	var lines []string
	for line := range strings.Lines(string(raw)) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			lines = append(lines, line)
		}
	}
	s := strings.Join(lines, "")
	if strings.Contains(s, "{blocked_heads}") {
		s = strings.ReplaceAll(s, "{blocked_heads}", b.opsQuery("blocked_heads"))
	}
	s = strings.ReplaceAll(s, "{entry_columns}", entryColumns)
	s = strings.ReplaceAll(s, "{fold}", foldSQL("o.last_error"))
	s = strings.ReplaceAll(s, "{partition_list}", partitionList(b.opts.Partitions))
	return strings.TrimSpace(b.names.render(s))
}

// partitionList is "0, 1, ..., n-1".
func partitionList(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = strconv.Itoa(i)
	}
	return strings.Join(parts, ", ")
}

// foldSQL is the SQL of the bytes of col with the ASCII letters A-Z
// lower-cased, byte by byte: REPLACE on a binary string is exact, where
// LOWER would follow the collation (or do nothing to binary strings).
func foldSQL(col string) string {
	s := "CAST(" + col + " AS BINARY)"
	for c := 'A'; c <= 'Z'; c++ {
		s = "REPLACE(" + s + ", '" + string(c) + "', '" + string(c+'a'-'A') + "')"
	}
	return s
}

// opsError maps an error of an operator or move call with
// interpretError (errors.go), and makes an error that came from a
// context ending (a dropped connection, a finished transaction, a killed
// statement) wrap ctx's error.
func (b *Backend) opsError(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%s: %s: %w (%v)", pkgName, op, cerr, err)
	}
	return b.interpretError(op, err)
}

// inTx runs fn in a transaction of the pool and commits it; an error of
// fn rolls it back.
func (b *Backend) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// anyArgs converts ids to statement arguments, after the leading ones.
func anyArgs(lead []any, ids []string) []any {
	out := make([]any, 0, len(lead)+len(ids))
	out = append(out, lead...)
	for _, id := range ids {
		out = append(out, id)
	}
	return out
}

// entryColumns are the columns an entry is reported with (entryRow reads
// them, in order). Times are microseconds since the epoch.
var entryColumns = "o.id, o.`partition`, o.topic, o.`key`, o.payload, o.headers, " + microsOf("o.not_before") +
	", o.attempts, o.last_error, " + microsOf("o.created_at") + ", o.state = 'parked', " + microsOf("o.next_at") +
	", o.deferred <> 0 AND o.state = 'pending', o.history"

// entryRow holds the columns of entryColumns.
type entryRow struct {
	id       string
	part     int64
	topic    string
	key      []byte
	payload  []byte
	headers  []byte
	notBef   sql.NullInt64
	attempts int64
	lastErr  string
	created  sql.NullInt64
	parked   bool
	nextAt   sql.NullInt64
	deferred bool
	history  []byte
}

// targets are the Scan destinations of the columns, in order.
func (r *entryRow) targets() []any {
	return []any{&r.id, &r.part, &r.topic, &r.key, &r.payload, &r.headers, &r.notBef, &r.attempts,
		&r.lastErr, &r.created, &r.parked, &r.nextAt, &r.deferred, &r.history}
}

// info is the row as Lookup reports it: a row that cannot be published
// as stored (headers that do not decode, an empty topic, a partition
// outside 0..partitions-1) has what could be read and a LastError naming
// the column and the fix; a negative attempts column reads as 0; DueAt is
// zero for a parked entry.
func (r *entryRow) info(partitions int) outbox.EntryInfo {
	c := checkRow(r.topic, r.headers, r.part, partitions)
	info := outbox.EntryInfo{Entry: outbox.Entry{
		ID: r.id, Topic: r.topic, Key: string(r.key), Payload: r.payload, Headers: c.headers,
		NotBefore: nullTime(r.notBef), Partition: int(r.part), Attempts: attemptsOf(r.attempts),
		LastError: sqlrow.WithReason(r.lastErr, c.reason), CreatedAt: nullTime(r.created),
	}, Parked: r.parked, Deferred: r.deferred, History: decodeHistory(r.history)}
	if !info.Parked {
		info.DueAt = nullTime(r.nextAt)
	}
	return info
}

// nullTime is the time of a microseconds column, zero when NULL.
func nullTime(us sql.NullInt64) time.Time {
	if !us.Valid {
		return time.Time{}
	}
	return fromMicros(us.Int64)
}

// historyLayouts are the layouts an attempt's "at" is read with: RFC 3339
// (what MarkFailed and Import write, UTC with microseconds), and the
// DATETIME text of the server.
var historyLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999", "2006-01-02T15:04:05.999999"}

// storedAttempt is an element of the history column.
type storedAttempt struct {
	At    string `json:"at"`
	Error string `json:"error"`
	Owner string `json:"owner"`
}

// decodeHistory decodes the history column: a JSON array of {"at",
// "error", "owner"}. NULL and a value that is not an array read as no
// history, and an element that does not decode is left out (only a
// hand-made UPDATE writes either); an element whose time does not parse
// has the zero At.
func decodeHistory(raw []byte) []outbox.Attempt {
	var elems []json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &elems) != nil {
		return nil
	}
	var out []outbox.Attempt
	for _, e := range elems {
		var a storedAttempt
		if json.Unmarshal(e, &a) != nil {
			continue
		}
		var at time.Time
		for _, layout := range historyLayouts {
			if t, err := time.Parse(layout, a.At); err == nil {
				at = t.UTC()
				break
			}
		}
		out = append(out, outbox.Attempt{At: at, Error: a.Error, Owner: a.Owner})
	}
	return out
}

// historyAtLayout is the layout of an attempt's "at": UTC, RFC 3339 with
// microseconds.
const historyAtLayout = "2006-01-02T15:04:05.000000Z"

// encodeHistory is the history column of h (its last
// outbox.MaxAttemptHistory attempts), "" with ok false for no history.
func encodeHistory(h []outbox.Attempt) (string, bool, error) {
	if len(h) == 0 {
		return "", false, nil
	}
	if len(h) > outbox.MaxAttemptHistory {
		h = h[len(h)-outbox.MaxAttemptHistory:]
	}
	out := make([]storedAttempt, len(h))
	for i, a := range h {
		out[i] = storedAttempt{At: a.At.UTC().Format(historyAtLayout), Error: cleanError(a.Error), Owner: cleanError(a.Owner)}
	}
	raw, err := json.Marshal(out)
	return string(raw), true, err
}

// bytesArg is s as a binary statement argument: never nil, which the
// driver would send as NULL.
func bytesArg(s string) []byte { return append([]byte{}, s...) }

// validText reports whether a utf8mb4 column can hold s as it is.
func validText(s string) bool { return utf8.ValidString(s) }
