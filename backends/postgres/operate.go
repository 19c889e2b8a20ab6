package pgoutbox

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/outboxrelay/outbox/internal/sqlrow"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxrelay/outbox"
)

// This file implements the operator interfaces (outbox.Lister,
// outbox.Pauser, outbox.MemberLister) on the objects of migration 007:
// the history and deferred columns, the paused-topic and paused-partition
// tables and the member table's host, version and start. docs/postgres.md,
// "Operators", explains the queries and their costs.

// Compile-time checks of the operator interfaces.
var (
	_ outbox.Lister       = (*Backend)(nil)
	_ outbox.Pauser       = (*Backend)(nil)
	_ outbox.MemberLister = (*Backend)(nil)
)

// operatorsVersion is the migration that creates what operators need
// (and what MarkFailed and the fetch use since): New requires it.
const operatorsVersion = 7

// maxMemberText is where Heartbeat cuts Member.Host and Member.Version
// (bytes).
const maxMemberText = 255

// entryStates are the states Entries lists, in the order of
// Backend.qEntries, and stateConds the condition of each on the outbox
// row o, judged by the statement's now(). A negative attempts column
// (only a hand-made UPDATE writes one) reads as 0, as everywhere.
var (
	entryStates = [...]outbox.EntryState{outbox.StateDue, outbox.StateScheduled, outbox.StateRetrying, outbox.StateParked}
	stateConds  = [len(entryStates)]string{
		"o.state = 'pending' AND o.next_at <= now()",
		"o.state = 'pending' AND o.next_at > now() AND o.attempts <= 0",
		"o.state = 'pending' AND o.next_at > now() AND o.attempts > 0",
		"o.state = 'parked'",
	}
)

// loadOperatorQueries loads the queries of this file with load (which
// renders them).
func (b *Backend) loadOperatorQueries(load func(string) string) {
	for i, cond := range stateConds {
		b.qEntries[i] = strings.ReplaceAll(load("entries"), "{state}", cond)
	}
	b.qBlockedKeys = load("blocked_keys")
	b.qPauseTopic = load("pause_topic")
	b.qResumeTopic = load("resume_topic")
	b.qPausePartition = load("pause_partition")
	b.qResumePartition = load("resume_partition")
	b.qPaused = load("paused")
}

// Entries lists the entries in state that match filter, after the ID
// after in byte order (COLLATE "C", whatever the database's collation), at
// most limit, in one statement (queries/entries.sql). Each is reported as
// [Backend.Lookup] reports it: DueAt, Deferred and History filled, and
// rows that cannot be published as stored listed with a LastError naming
// the column and the fix. The state of a pending entry is judged by the
// database's clock: due (next attempt time not after now()), scheduled
// (later, never attempted), retrying (later, attempted). The filter is
// applied in the statement: Topic and Key exactly, Error as a substring of
// the last error with ASCII letters folded (other characters compare as
// they are; see entries.sql), Since and Until on the creation time.
//
// Parked entries are paged by the parked index, which is in that order;
// the entries of a pending state are found through the due index and
// sorted per call (a top-N sort of those after after that pass the
// filter), see docs/postgres.md, "Operators". A limit that is not
// positive or an unknown state gives an error wrapping
// [outbox.ErrInvalidArgument], and so does an after that PostgreSQL text
// cannot hold (invalid UTF-8 or NUL, which no ID can be). A filter Topic
// or Error that PostgreSQL text cannot hold matches nothing (no query). Safe for concurrent use; after
// Close it returns [outbox.ErrClosed]. See [outbox.Lister].
func (b *Backend) Entries(ctx context.Context, state outbox.EntryState, filter outbox.ListFilter, after string, limit int) ([]outbox.EntryInfo, error) {
	const op = "Entries"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	i := slices.Index(entryStates[:], state)
	if i < 0 {
		return nil, fmt.Errorf("pgoutbox: %s: state %q is unknown; use one of %v: %w", op, state, outbox.EntryStates, outbox.ErrInvalidArgument)
	}
	if err := checkListing(op, after, limit); err != nil {
		return nil, err
	}
	args, ok := filterArgs(filter)
	if !ok {
		return nil, nil
	}
	rows, err := b.pool.Query(ctx, b.qEntries[i], append([]any{after, limit}, args...)...)
	if err != nil {
		return nil, b.interpretError(op, err)
	}
	defer rows.Close()
	var out []outbox.EntryInfo
	for rows.Next() {
		var r entryRow
		if err := rows.Scan(r.targets()...); err != nil {
			return nil, b.interpretError(op, err)
		}
		out = append(out, r.info(b.opts.Partitions))
	}
	if err := rows.Err(); err != nil {
		return nil, b.interpretError(op, err)
	}
	return out, nil
}

// BlockedKeys lists the keys held back by their head entry in one
// statement (queries/blocked_keys.sql over blocked_heads.sql): per
// partition and non-empty key, its earliest-appended pending entry (the
// lowest seq: an imported entry before appended ones, a requeued one as
// appended when requeued) when it was attempted, deferred or is of a
// paused topic, with Waiting, the key's other pending entries, and Since,
// the time of the oldest attempt in its history, else its creation time.
// Ordered by Since, then by the byte order of the head's ID; a page starts
// after after's (Since, Head.ID), the first page at the zero BlockedKey.
// The filter applies to the head entry, as in [Backend.Entries].
//
// Cost: the candidate keys come from the hold-back index (and, while a
// topic is paused, from a pass over the pending rows), then the pending
// rows of those keys are found in one pass over the pending rows, so a
// call reads the outbox's pending rows once unless nothing is failing,
// deferred or paused (docs/postgres.md, "Operators"). Errors as for
// [Backend.Entries]. See [outbox.Lister].
func (b *Backend) BlockedKeys(ctx context.Context, filter outbox.ListFilter, after outbox.BlockedKey, limit int) ([]outbox.BlockedKey, error) {
	const op = "BlockedKeys"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	if err := checkListing(op, after.Head.ID, limit); err != nil {
		return nil, err
	}
	args, ok := filterArgs(filter)
	if !ok {
		return nil, nil
	}
	first := after.Head.ID == "" && after.Since.IsZero()
	rows, err := b.pool.Query(ctx, b.qBlockedKeys, append([]any{first, tstz(after.Since), after.Head.ID, limit}, args...)...)
	if err != nil {
		return nil, b.interpretError(op, err)
	}
	defer rows.Close()
	var out []outbox.BlockedKey
	for rows.Next() {
		var (
			r     entryRow
			k     outbox.BlockedKey
			since pgtype.Timestamptz
		)
		if err := rows.Scan(append(r.targets(), &k.Waiting, &since)...); err != nil {
			return nil, b.interpretError(op, err)
		}
		k.Head, k.Since = r.info(b.opts.Partitions), timeOf(since)
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, b.interpretError(op, err)
	}
	return out, nil
}

// checkListing checks the paging arguments of a listing.
func checkListing(op, after string, limit int) error {
	if limit <= 0 {
		return fmt.Errorf("pgoutbox: %s: limit is %d, must be positive: %w", op, limit, outbox.ErrInvalidArgument)
	}
	if !storableText(after) {
		return fmt.Errorf("pgoutbox: %s: the ID to page after is not valid UTF-8 without NUL bytes, which no ID is (PostgreSQL text); pass the ID of the last entry of the previous page: %w", op, outbox.ErrInvalidArgument)
	}
	return nil
}

// filterArgs returns the filter's query parameters (topic, key, error
// folded, since, until; NULL when unset). ok is false when no stored entry
// can match (a Topic or Error that PostgreSQL text cannot hold).
func filterArgs(f outbox.ListFilter) (args []any, ok bool) {
	var topic, errText pgtype.Text
	var key []byte
	if f.Topic != "" {
		topic = pgtype.Text{String: f.Topic, Valid: true}
	}
	if f.Key != "" {
		key = []byte(f.Key)
	}
	if f.Error != "" {
		errText = pgtype.Text{String: asciiLower(f.Error), Valid: true}
	}
	if !storableText(f.Topic) || !storableText(f.Error) {
		return nil, false
	}
	return []any{topic, key, errText, tstz(f.Since), tstz(f.Until)}, true
}

// asciiLower lower-cases the ASCII letters of s and leaves every other
// byte as it is.
func asciiLower(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return r
	}, s)
}

// entryRow holds the columns of queries/entry_columns.sql.
type entryRow struct {
	id       string
	part     int32
	topic    string
	key      []byte
	payload  []byte
	headers  []byte
	notBef   pgtype.Timestamptz
	attempts int32
	lastErr  string
	created  pgtype.Timestamptz
	parked   bool
	nextAt   pgtype.Timestamptz
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
// the column and the fix; a negative attempts column reads as 0, an
// infinite timestamp as the zero time; DueAt is zero for a parked entry.
func (r *entryRow) info(partitions int) outbox.EntryInfo {
	c := checkRow(r.topic, r.headers, r.part, partitions)
	info := outbox.EntryInfo{Entry: outbox.Entry{
		ID: r.id, Topic: r.topic, Key: string(r.key), Payload: r.payload, Headers: c.headers,
		NotBefore: timeOf(r.notBef), Partition: int(r.part), Attempts: attemptsOf(r.attempts),
		LastError: sqlrow.WithReason(r.lastErr, c.reason), CreatedAt: timeOf(r.created),
	}, Parked: r.parked, Deferred: r.deferred, History: decodeHistory(r.history)}
	if !info.Parked {
		info.DueAt = timeOf(r.nextAt)
	}
	return info
}

// decodeHistory decodes the history column (see migration 007): a JSON
// array of {"at", "error", "owner"}, at in RFC 3339. NULL and a value that
// is not an array read as no history, and an element that does not decode
// is left out (only a hand-made UPDATE writes either); an element whose
// time does not parse has the zero At.
func decodeHistory(raw []byte) []outbox.Attempt {
	var elems []json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &elems) != nil {
		return nil
	}
	var out []outbox.Attempt
	for _, e := range elems {
		var a struct {
			At    string `json:"at"`
			Error string `json:"error"`
			Owner string `json:"owner"`
		}
		if json.Unmarshal(e, &a) != nil {
			continue
		}
		// In the local time zone, as pgx reports timestamptz columns.
		at, _ := time.Parse(time.RFC3339Nano, a.At)
		if !at.IsZero() {
			at = at.Local()
		}
		out = append(out, outbox.Attempt{At: at, Error: a.Error, Owner: a.Owner})
	}
	return out
}

// encodeHistory is the history column of h, as MarkFailed writes it (nil
// for no history): for Import.
func encodeHistory(h []outbox.Attempt) ([]byte, error) {
	if len(h) == 0 {
		return nil, nil
	}
	if len(h) > outbox.MaxAttemptHistory {
		h = h[len(h)-outbox.MaxAttemptHistory:]
	}
	type stored struct {
		At    string `json:"at"`
		Error string `json:"error"`
		Owner string `json:"owner"`
	}
	out := make([]stored, len(h))
	for i, a := range h {
		out[i] = stored{At: a.At.UTC().Format("2006-01-02T15:04:05.000000Z"), Error: cleanError(a.Error), Owner: cutText(a.Owner, maxErrorLen)}
	}
	return json.Marshal(out)
}

// PauseTopic pauses topic for every relay of the outbox in one statement
// (a row of "<table>_pause_topic", since = the database's now()); pausing
// a paused topic keeps its since. From its commit on, a fetch leaves out
// the topic's entries and the entries of their keys appended after them
// (see queries/find_pending_batch.sql; docs/postgres.md has the cost).
// An empty topic, or one PostgreSQL text cannot hold, gives an error
// wrapping [outbox.ErrInvalidArgument]. See [outbox.Pauser].
func (b *Backend) PauseTopic(ctx context.Context, topic string) error {
	return b.pauseTopic(ctx, "PauseTopic", b.qPauseTopic, topic)
}

// ResumeTopic resumes topic in one statement: the next fetch returns its
// entries. A topic that is not paused is a no-op. Errors as for
// [Backend.PauseTopic]. See [outbox.Pauser].
func (b *Backend) ResumeTopic(ctx context.Context, topic string) error {
	return b.pauseTopic(ctx, "ResumeTopic", b.qResumeTopic, topic)
}

func (b *Backend) pauseTopic(ctx context.Context, op, q, topic string) error {
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if topic == "" {
		return fmt.Errorf("pgoutbox: %s: the topic is empty; name the topic to pause or resume: %w", op, outbox.ErrInvalidArgument)
	}
	if !storableText(topic) {
		return fmt.Errorf("pgoutbox: %s: topic %q is not valid UTF-8 without NUL bytes, which no topic is (PostgreSQL text): %w", op, topic, outbox.ErrInvalidArgument)
	}
	_, err := b.pool.Exec(ctx, q, topic)
	return b.interpretError(op, err)
}

// PausePartition pauses partition for every relay in one statement (a row
// of "<table>_pause_part"); pausing a paused partition keeps its since.
// From its commit on, a fetch of the partition checks the lease and
// returns nothing. A partition outside [0, Partitions()) gives an error
// wrapping [outbox.ErrInvalidArgument]. See [outbox.Pauser].
func (b *Backend) PausePartition(ctx context.Context, partition int) error {
	return b.pausePartition(ctx, "PausePartition", b.qPausePartition, partition)
}

// ResumePartition resumes partition in one statement; one that is not
// paused is a no-op. Errors as for [Backend.PausePartition]. See
// [outbox.Pauser].
func (b *Backend) ResumePartition(ctx context.Context, partition int) error {
	return b.pausePartition(ctx, "ResumePartition", b.qResumePartition, partition)
}

func (b *Backend) pausePartition(ctx context.Context, op, q string, partition int) error {
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if err := outbox.CheckPartition(b.opts.Partitions, partition); err != nil {
		return argErr(op, err)
	}
	_, err := b.pool.Exec(ctx, q, int32(partition))
	return b.interpretError(op, err)
}

// Paused reports the paused topics (byte order) and partitions
// (ascending) with their since, in one statement. See [outbox.Pauser].
func (b *Backend) Paused(ctx context.Context) (outbox.Paused, error) {
	const op = "Paused"
	if err := b.checkOpen(op); err != nil {
		return outbox.Paused{}, err
	}
	rows, err := b.pool.Query(ctx, b.qPaused)
	if err != nil {
		return outbox.Paused{}, b.interpretError(op, err)
	}
	defer rows.Close()
	var p outbox.Paused
	for rows.Next() {
		var (
			kind, topic string
			part        int32
			since       time.Time
		)
		if err := rows.Scan(&kind, &topic, &part, &since); err != nil {
			return outbox.Paused{}, b.interpretError(op, err)
		}
		if kind == "t" {
			p.Topics = append(p.Topics, outbox.PausedTopic{Topic: topic, Since: since})
		} else {
			p.Partitions = append(p.Partitions, outbox.PausedPartition{Partition: int(part), Since: since})
		}
	}
	if err := rows.Err(); err != nil {
		return outbox.Paused{}, b.interpretError(op, err)
	}
	return p, nil
}

// Members returns the live member records (not expired by the database's
// clock), sorted by Owner in byte order, with every field Heartbeat
// stored, Expires and Renewed, in one read-only statement. See
// [outbox.MemberLister].
func (b *Backend) Members(ctx context.Context) ([]outbox.Member, error) {
	const op = "Members"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	rows, err := b.pool.Query(ctx, b.qMembers)
	if err != nil {
		return nil, b.interpretError(op, err)
	}
	return b.scanMembers(op, rows)
}

// scanMembers reads the member rows of heartbeat.sql and members.sql.
func (b *Backend) scanMembers(op string, rows pgx.Rows) ([]outbox.Member, error) {
	defer rows.Close()
	var out []outbox.Member
	for rows.Next() {
		var (
			rec              outbox.Member
			ps               []int32
			maxP             int32
			expires, started pgtype.Timestamptz
			renewed          pgtype.Timestamptz
		)
		if err := rows.Scan(&rec.Owner, &ps, &maxP, &expires, &rec.Host, &rec.Version, &started, &renewed); err != nil {
			return nil, b.interpretError(op, err)
		}
		if len(ps) > 0 {
			rec.Partitions = make([]int, len(ps))
			for i, p := range ps {
				rec.Partitions[i] = int(p)
			}
		}
		rec.MaxPartitions, rec.Expires = int(maxP), expires.Time
		rec.Started, rec.Renewed = timeOf(started), timeOf(renewed)
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, b.interpretError(op, err)
	}
	return out, nil
}
