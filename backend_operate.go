package outbox

import (
	"context"
	"time"
)

// The operator SPI: optional interfaces of a [Store] through which
// operators see every entry by its state and what blocks each key
// ([Lister]), steer delivery by topic or partition ([Pauser]) and see the
// fleet ([MemberLister]). The CLI and the dashboard use each when a store
// implements it. The attempt history ([Attempt]) is kept by every backend
// through [Store.MarkFailed] and reported by [Looker] and [Lister].

// MaxAttemptHistory is how many attempts of an entry a backend keeps: the
// last MaxAttemptHistory, oldest first.
const MaxAttemptHistory = 10

// Attempt is one failed delivery attempt of an entry, as a backend keeps it
// in the entry's history: one per [Failure] given to [Store.MarkFailed]
// that is not [Failure.Deferred].
type Attempt struct {
	// At is when MarkFailed recorded the attempt, by the store's clock.
	At time.Time
	// Error is the failure's Error (truncated as LastError is).
	Error string
	// Owner is the Owner of the lease MarkFailed was called with: the relay
	// that made the attempt.
	Owner string
}

// EntryState is the state of an entry as [Lister.Entries] selects it. A
// pending entry is in exactly one of the first three states, judged by the
// store's clock at the moment of the call.
type EntryState string

const (
	// StateDue: pending and its next attempt time has come (held back by
	// its key, claimed by a relay, or waiting to be fetched).
	StateDue EntryState = "due"
	// StateScheduled: pending, due at a future time and never attempted
	// (appended with a future NotBefore, or deferred by an open breaker
	// before its first attempt).
	StateScheduled EntryState = "scheduled"
	// StateRetrying: pending, attempted at least once and due again at a
	// future time.
	StateRetrying EntryState = "retrying"
	// StateParked: parked (dead-lettered).
	StateParked EntryState = "parked"
)

// EntryStates are the states [Lister.Entries] accepts, in the order a
// front end lists them.
var EntryStates = []EntryState{StateDue, StateScheduled, StateRetrying, StateParked}

// ListFilter selects entries for [Lister]; every field that is set must
// match, and the zero ListFilter matches every entry.
type ListFilter struct {
	// Topic, when set, is the entry's topic exactly.
	Topic string
	// Key, when set, is the entry's key exactly (the empty key cannot be
	// selected on its own).
	Key string
	// Error, when set, is a substring of the entry's last error, compared
	// case-insensitively (ASCII letters fold; other bytes compare as they
	// are).
	Error string
	// Since and Until, when set, bound the entry's CreatedAt: at or after
	// Since, before Until.
	Since, Until time.Time
}

// Lister is an optional interface of a [Store] for operators: the entries
// of the outbox by state, and the keys held back by a failing entry.
//
// Both methods make no change, are safe for concurrent use, return an error
// wrapping [ErrInvalidArgument] for a limit that is not positive or an
// unknown state, an error wrapping [ErrClosed] after Close, and context
// errors as they are. Entries appended, sent or changed while an operator
// pages may be missed or listed twice across pages; a page itself is one
// consistent read where the backend can make it one.
type Lister interface {
	// Entries lists the entries in state that match filter, ordered by the
	// byte order of their IDs (as Go compares strings, never a database
	// collation), starting after the ID after ("" for the first page), at
	// most limit of them. Each entry is reported as [Looker.Lookup] reports
	// it, with its attempt history.
	Entries(ctx context.Context, state EntryState, filter ListFilter, after string, limit int) ([]EntryInfo, error)

	// BlockedKeys lists the keys whose head entry holds back the later
	// entries of its key: for each partition and non-empty key, the
	// earliest-appended pending entry of the key when it has been attempted
	// (Attempts > 0) or deferred ([Failure.Deferred]), or is of a paused
	// topic ([Pauser]), with the number of pending entries of the key
	// appended after it. The filter applies to the head entry. Keys are
	// ordered by how long they have been blocked ([BlockedKey.Since], the
	// longest first), ties by the byte order of the head's ID; a page
	// starts after the key whose Since and head ID are after ("after" as
	// returned in the last BlockedKey of the previous page; the zero
	// BlockedKey for the first page), at most limit of them.
	BlockedKeys(ctx context.Context, filter ListFilter, after BlockedKey, limit int) ([]BlockedKey, error)
}

// BlockedKey is a key held back by its head entry, as [Lister.BlockedKeys]
// reports it.
type BlockedKey struct {
	// Head is the entry that holds the key back, as [Looker.Lookup]
	// reports it (Partition, Key, Attempts, LastError, DueAt: the next
	// attempt time, History).
	Head EntryInfo
	// Waiting counts the pending entries of the key appended after Head.
	Waiting int64
	// Since is when the key became blocked, by the store's clock: the At
	// of the oldest attempt in Head's history, else (deferred or paused
	// before any attempt) Head's CreatedAt.
	Since time.Time
}

// Pauser is an optional interface of a [Store] through which operators stop
// and restart delivery by topic or by partition, for every relay of the
// fleet: the pause is stored in the outbox.
//
// While a topic is paused, no fetch (FindPendingBatch, FetchBatch,
// FetchNext) returns an entry of it, and each such pending entry holds back
// the later entries of its key (of every topic), as a failing entry does;
// while a partition is paused, a fetch of it returns no entry (the lease
// is still checked). The entries stay pending, unchanged: no attempt is
// counted. A fetch that began before Pause returned may still return
// them; the next fetch does not. Resume makes them eligible again at the
// next fetch.
//
// All methods are idempotent, safe for concurrent use, make no change to
// entries, return an error wrapping [ErrClosed] after Close and context
// errors as they are. A partition outside [0, Partitions()) or an empty
// topic is rejected with [ErrInvalidArgument].
type Pauser interface {
	// PauseTopic pauses topic. Pausing a paused topic keeps its Since.
	PauseTopic(ctx context.Context, topic string) error
	// ResumeTopic resumes topic; a topic that is not paused is a no-op.
	ResumeTopic(ctx context.Context, topic string) error
	// PausePartition pauses partition. Pausing a paused partition keeps
	// its Since.
	PausePartition(ctx context.Context, partition int) error
	// ResumePartition resumes partition; one that is not paused is a
	// no-op.
	ResumePartition(ctx context.Context, partition int) error
	// Paused reports what is paused: topics sorted by byte order,
	// partitions ascending.
	Paused(ctx context.Context) (Paused, error)
}

// Paused is what a [Pauser] reports as paused.
type Paused struct {
	Topics     []PausedTopic
	Partitions []PausedPartition
}

// Empty reports whether nothing is paused.
func (p Paused) Empty() bool { return len(p.Topics) == 0 && len(p.Partitions) == 0 }

// PausedTopic is a paused topic and since when, by the store's clock.
type PausedTopic struct {
	Topic string
	Since time.Time
}

// PausedPartition is a paused partition and since when, by the store's
// clock.
type PausedPartition struct {
	Partition int
	Since     time.Time
}

// MemberLister is an optional interface of a [Store] that implements
// [Membership]: it lists the fleet for operators without joining it.
type MemberLister interface {
	// Members returns every member whose record has not expired by the
	// store's clock, sorted by Owner (byte order), with every field
	// [Membership.Heartbeat] stored and Expires set. It makes no change,
	// is safe for concurrent use, returns an error wrapping [ErrClosed]
	// after Close and context errors as they are.
	Members(ctx context.Context) ([]Member, error)
}
