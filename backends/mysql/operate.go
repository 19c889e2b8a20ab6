package mysqloutbox

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxrelay/outbox"
)

// This file implements the operator interfaces outbox.Lister and
// outbox.Pauser (outbox.MemberLister is in membership.go).

// entryStates are the states Entries lists, in the order of
// opsState.qEntries, and stateConds the condition of each on the outbox
// row o, judged by the statement's clock reading. A negative attempts
// column (only a hand-made UPDATE writes one) reads as 0, as everywhere.
var (
	entryStates = [...]outbox.EntryState{outbox.StateDue, outbox.StateScheduled, outbox.StateRetrying, outbox.StateParked}
	stateConds  = [len(entryStates)]string{
		"o.state = 'pending' AND o.next_at <= UTC_TIMESTAMP(6)",
		"o.state = 'pending' AND o.next_at > UTC_TIMESTAMP(6) AND o.attempts <= 0",
		"o.state = 'pending' AND o.next_at > UTC_TIMESTAMP(6) AND o.attempts > 0",
		"o.state = 'parked'",
	}
)

// Entries lists the entries in state that match filter, after the ID
// after in byte order (as Go compares strings: the id column is
// VARBINARY), at most limit, in one statement (queries/entries.sql). Each
// is reported as [Backend.Lookup] reports it: DueAt, Deferred and History
// filled, and rows that cannot be published as stored listed with a
// LastError naming the column and the fix. The state of a pending entry
// is judged by the server's clock: due (next attempt time not after now),
// scheduled (later, never attempted), retrying (later, attempted). The
// filter is applied in the statement: Topic and Key exactly (byte for
// byte), Error as a substring of the last error with ASCII letters folded
// (other bytes compare as they are), Since and Until on the creation
// time.
//
// Cost: the rows of the state that pass the filter are sorted by ID per
// call (a top-N sort), see docs/mysql.md. A limit that is not positive or
// an unknown state gives an error wrapping [outbox.ErrInvalidArgument].
// Safe for concurrent use; after Close it returns [outbox.ErrClosed]. See
// [outbox.Lister].
func (b *Backend) Entries(ctx context.Context, state outbox.EntryState, filter outbox.ListFilter, after string, limit int) ([]outbox.EntryInfo, error) {
	const op = "Entries"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	i := slices.Index(entryStates[:], state)
	if i < 0 {
		return nil, fmt.Errorf("%s: %s: state %q is unknown; use one of %v: %w", pkgName, op, state, outbox.EntryStates, outbox.ErrInvalidArgument)
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%s: %s: limit is %d, must be positive: %w", pkgName, op, limit, outbox.ErrInvalidArgument)
	}
	args := append([]any{bytesArg(after)}, filterArgs(filter)...)
	return b.queryEntries(ctx, op, b.ops.qEntries[i], append(args, limit)...)
}

// filterArgs are the filter's statement arguments: each of topic (bytes),
// key (bytes), error (ASCII lower-cased bytes), created at or after and
// created before (microseconds) twice, NULL when unset.
func filterArgs(f outbox.ListFilter) []any {
	var topic, key, errText []byte
	var since, until sql.NullInt64
	if f.Topic != "" {
		topic = []byte(f.Topic)
	}
	if f.Key != "" {
		key = []byte(f.Key)
	}
	if f.Error != "" {
		errText = []byte(asciiLower(f.Error))
	}
	if !f.Since.IsZero() {
		since = sql.NullInt64{Int64: toMicros(f.Since), Valid: true}
	}
	if !f.Until.IsZero() {
		until = sql.NullInt64{Int64: toMicros(f.Until), Valid: true}
	}
	return []any{topic, topic, key, key, errText, errText, since, since, until, until}
}

// asciiLower lower-cases the ASCII letters of s and leaves every other
// byte as it is.
func asciiLower(s string) string {
	out := []byte(s)
	for i, c := range out {
		if 'A' <= c && c <= 'Z' {
			out[i] = c + ('a' - 'A')
		}
	}
	return string(out)
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
// Cost: the candidate keys come from the rows that hold back their key
// and, while a topic is paused, from the pending rows of paused topics;
// then the pending rows of those keys are numbered per key (a sort of
// them). Errors as for [Backend.Entries]. See [outbox.Lister].
func (b *Backend) BlockedKeys(ctx context.Context, filter outbox.ListFilter, after outbox.BlockedKey, limit int) ([]outbox.BlockedKey, error) {
	const op = "BlockedKeys"
	if err := b.checkOpen(op); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%s: %s: limit is %d, must be positive: %w", pkgName, op, limit, outbox.ErrInvalidArgument)
	}
	first := after.Head.ID == "" && after.Since.IsZero()
	args := append([]any{first, toMicros(after.Since), bytesArg(after.Head.ID)}, filterArgs(filter)...)
	rows, err := b.db.QueryContext(ctx, b.ops.qBlockedKeys, append(args, limit)...)
	if err != nil {
		return nil, b.opsError(ctx, op, err)
	}
	defer rows.Close()
	var out []outbox.BlockedKey
	for rows.Next() {
		var (
			r     entryRow
			k     outbox.BlockedKey
			since sql.NullInt64
		)
		if err := rows.Scan(append(r.targets(), &k.Waiting, &since)...); err != nil {
			return nil, b.opsError(ctx, op, err)
		}
		k.Head, k.Since = r.info(b.opts.Partitions), nullTime(since)
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, b.opsError(ctx, op, err)
	}
	return out, nil
}

// PauseTopic pauses topic for every relay of the outbox in one statement
// (a row of Table+"_pause_topic", since = the server's clock); pausing a
// paused topic keeps its since. From its commit on, a fetch leaves out
// the topic's entries and the entries of their keys appended after them.
// An empty topic, one over [outbox.MaxTopicLen] bytes or one that is not
// valid UTF-8 (no entry has such a topic) gives an error wrapping
// [outbox.ErrInvalidArgument]. Topics are compared by their bytes:
// pausing "orders" leaves "orders " running. See [outbox.Pauser].
func (b *Backend) PauseTopic(ctx context.Context, topic string) error {
	const op = "PauseTopic"
	if err := b.checkPauseTopic(op, topic); err != nil {
		return err
	}
	_, err := b.db.ExecContext(ctx, b.ops.qPauseTopic, topic)
	return b.opsError(ctx, op, err)
}

// ResumeTopic resumes topic in one statement: the next fetch returns its
// entries. A topic that is not paused is a no-op. Errors as for
// [Backend.PauseTopic]. See [outbox.Pauser].
func (b *Backend) ResumeTopic(ctx context.Context, topic string) error {
	const op = "ResumeTopic"
	if err := b.checkPauseTopic(op, topic); err != nil {
		return err
	}
	_, err := b.db.ExecContext(ctx, b.ops.qResumeTopic, topic)
	return b.opsError(ctx, op, err)
}

func (b *Backend) checkPauseTopic(op, topic string) error {
	if err := b.checkOpen(op); err != nil {
		return err
	}
	switch {
	case topic == "":
		return fmt.Errorf("%s: %s: the topic is empty; name the topic to pause or resume: %w", pkgName, op, outbox.ErrInvalidArgument)
	case len(topic) > outbox.MaxTopicLen:
		return fmt.Errorf("%s: %s: the topic is %d bytes, over the %d no entry's topic exceeds: %w", pkgName, op, len(topic), outbox.MaxTopicLen, outbox.ErrInvalidArgument)
	case !validText(topic):
		return fmt.Errorf("%s: %s: topic %q is not valid UTF-8, which no topic is: %w", pkgName, op, topic, outbox.ErrInvalidArgument)
	}
	return nil
}

// PausePartition pauses partition for every relay in one statement (a row
// of Table+"_pause_part"); pausing a paused partition keeps its since.
// From its commit on, a fetch of the partition checks the lease and
// returns nothing. A partition outside [0, Partitions()) gives an error
// wrapping [outbox.ErrInvalidArgument]. See [outbox.Pauser].
func (b *Backend) PausePartition(ctx context.Context, partition int) error {
	return b.pausePartition(ctx, "PausePartition", b.ops.qPausePart, partition)
}

// ResumePartition resumes partition in one statement; one that is not
// paused is a no-op. Errors as for [Backend.PausePartition]. See
// [outbox.Pauser].
func (b *Backend) ResumePartition(ctx context.Context, partition int) error {
	return b.pausePartition(ctx, "ResumePartition", b.ops.qResumePart, partition)
}

func (b *Backend) pausePartition(ctx context.Context, op, q string, partition int) error {
	if err := b.checkOpen(op); err != nil {
		return err
	}
	if err := outbox.CheckPartition(b.opts.Partitions, partition); err != nil {
		return argErr(op, err)
	}
	_, err := b.db.ExecContext(ctx, q, partition)
	return b.opsError(ctx, op, err)
}

// Paused reports the paused topics (byte order) and partitions
// (ascending) with their since, by the server's clock, in one statement.
// See [outbox.Pauser].
func (b *Backend) Paused(ctx context.Context) (outbox.Paused, error) {
	const op = "Paused"
	if err := b.checkOpen(op); err != nil {
		return outbox.Paused{}, err
	}
	rows, err := b.db.QueryContext(ctx, b.ops.qPaused)
	if err != nil {
		return outbox.Paused{}, b.opsError(ctx, op, err)
	}
	defer rows.Close()
	var p outbox.Paused
	for rows.Next() {
		var (
			kind  string
			topic []byte
			part  int64
			since int64
		)
		if err := rows.Scan(&kind, &topic, &part, &since); err != nil {
			return outbox.Paused{}, b.opsError(ctx, op, err)
		}
		if kind == "t" {
			p.Topics = append(p.Topics, outbox.PausedTopic{Topic: string(topic), Since: fromMicros(since)})
		} else {
			p.Partitions = append(p.Partitions, outbox.PausedPartition{Partition: int(part), Since: fromMicros(since)})
		}
	}
	if err := rows.Err(); err != nil {
		return outbox.Paused{}, b.opsError(ctx, op, err)
	}
	slices.SortFunc(p.Topics, func(x, y outbox.PausedTopic) int { return strings.Compare(x.Topic, y.Topic) })
	slices.SortFunc(p.Partitions, func(x, y outbox.PausedPartition) int { return cmp.Compare(x.Partition, y.Partition) })
	return p, nil
}
