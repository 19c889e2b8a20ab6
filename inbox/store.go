package inbox

import (
	"context"
	"time"
)

// Store is where an [Inbox] keeps what it applied: the IDs of the messages
// whose transaction committed, each key's highest applied sequence number,
// and each source partition's next offset. Tx is the transaction type the
// store writes in, which is also the one the consumer's handler writes its
// effects in (pgx.Tx, *sql.Tx, a Redis MULTI, or [MemoryTx]).
//
// A Store does one storage round trip per call where it can, never sleeps
// and never retries: the Inbox owns policy (retries of transient conflicts,
// gap handling, batching). Every method is safe for concurrent use, each
// call with its own transaction. Methods do not retain the slices or maps
// they are given. Context errors pass through unwrapped.
//
// The conformance suite in package inboxtest checks an implementation.
type Store[Tx any] interface {
	// InTx begins a transaction, calls fn with it and commits it when fn
	// returns nil. When fn returns an error or panics, the transaction is
	// rolled back and fn's error returned (the panic re-raised): nothing
	// fn or the Store's methods wrote in tx stays. InTx does not retry;
	// a commit that fails returns the store's error, for which Retryable
	// says whether running the whole transaction again may succeed. A
	// transaction whose ctx ends before it commits is rolled back, with
	// an error errors.Is finds ctx's error in; with ctx already ended,
	// InTx returns that error (fn may not run).
	InTx(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error

	// Retryable reports whether err, returned by InTx or a method called
	// in its transaction, is a transient conflict (a deadlock, a
	// serialization failure, a lock wait timeout, a Redis WATCH conflict)
	// after which running the transaction again from the start may
	// succeed. It is false for nil and for context errors.
	Retryable(err error) bool

	// Record records ids as applied in tx, at the store's clock, and
	// reports for each, in the same order, whether it was new: true when
	// no committed transaction recorded it before, no earlier Record call
	// of tx recorded it, and it is not earlier in ids; false otherwise.
	// A store whose database cannot take all of ids in one statement
	// splits them and still answers in order. The record becomes visible to others
	// when tx commits and is gone if it rolls back.
	//
	// Concurrent transactions recording the same ID: at most one of them
	// commits with true reported for it. A SQL store makes the later
	// Record wait for the earlier transaction to finish (then reports
	// false if it committed, true if it rolled back); a store that cannot
	// wait (Redis) reports true to both and fails all but one commit with
	// an error for which Retryable is true. No ids returns (nil, nil).
	// An empty ID gives an error wrapping [ErrInvalidMessage].
	Record(ctx context.Context, tx Tx, ids []string) ([]bool, error)

	// KeySeqs returns the highest applied sequence number of each of keys
	// as committed (a key never set, or removed by Purge, is absent from
	// the map) and guards them for tx, present or absent: a concurrent
	// transaction that reads or sets one of them waits for tx or fails
	// with an error for which Retryable is true (SQL: a locking read
	// that also locks a key without a row, such as an upsert of a
	// placeholder row reported absent, or a deadlock on the gap lock), or
	// fails its commit with a retryable error (Redis: WATCH). No keys
	// returns an empty map.
	KeySeqs(ctx context.Context, tx Tx, keys []string) (map[string]int64, error)

	// SetKeySeqs sets the highest applied sequence number of each key in
	// seqs, in tx, at the store's clock (the time Purge compares). Empty
	// seqs does nothing.
	SetKeySeqs(ctx context.Context, tx Tx, seqs map[string]int64) error

	// SaveOffsets stores, in tx, the next offset to read of each source
	// partition in offsets (overwriting what was stored). Empty offsets
	// does nothing.
	SaveOffsets(ctx context.Context, tx Tx, offsets []Offset) error

	// Offsets returns the stored next offsets of every partition of topic
	// for consumer group, as committed, outside any transaction. A
	// partition never stored is absent from the map.
	Offsets(ctx context.Context, group, topic string) (map[int32]int64, error)

	// Purge removes, in a transaction of its own, at most limit recorded
	// IDs whose record is older than before, oldest first, and at most
	// limit key sequence numbers last set before before; it returns how
	// many IDs and how many keys it removed. Offsets are never removed.
	// limit must be at least 1 (else an error wrapping
	// [ErrInvalidArgument]). Purge never blocks on a row another
	// transaction holds (SQL: SKIP LOCKED): a record being written is
	// left for a later call.
	Purge(ctx context.Context, before time.Time, limit int) (ids, keys int, err error)
}

// Offset is the next offset to read of one partition of one topic, for one
// consumer group: the offset after the last record whose effects committed.
type Offset struct {
	Group     string
	Topic     string
	Partition int32
	Next      int64
}

// KeyRecorder is an optional interface of a [Store] that records IDs and
// reads key numbers in one round trip; the [Inbox] uses it, when the
// store implements it, for a batch with numbered messages (a SQL store:
// one statement instead of two, a per-record cost that shows on a
// message a transaction).
type KeyRecorder[Tx any] interface {
	// RecordWithKeySeqs is Record(ctx, tx, ids) followed by
	// KeySeqs(ctx, tx, keys), with the same answers and guards, in one
	// round trip. It returns Record's answers and KeySeqs' map. No keys
	// returns an empty map; no ids returns no answers. The Inbox passes
	// the keys of every numbered message in the batch, duplicates' too.
	RecordWithKeySeqs(ctx context.Context, tx Tx, ids, keys []string) ([]bool, map[string]int64, error)
}

// Finisher is an optional interface of a [Store] that writes a batch's
// key numbers and offsets in one round trip; the [Inbox] uses it, when
// the store implements it, once after the handlers of a batch that has
// something to write.
type Finisher[Tx any] interface {
	// Finish is SetKeySeqs(ctx, tx, seqs) followed by SaveOffsets(ctx,
	// tx, offsets), with the same effects, in one round trip. Either may
	// be empty; both empty does nothing.
	Finish(ctx context.Context, tx Tx, seqs map[string]int64, offsets []Offset) error
}

// OldestReporter is an optional interface of a [Store] that tells, in one
// cheap query (an index's first entry, a sorted set's first member), how
// old its oldest record is. [RunJanitor] asks it once after each round and
// exports the answer as the MetricOldestAge gauge: an age that keeps
// growing past the retention says the janitor is not keeping up, or not
// running.
type OldestReporter interface {
	// Oldest returns the time, by the store's clock, of the oldest record
	// Purge would remove: the earliest of the recorded IDs' times and the
	// key numbers' last-set times, committed. ok is false when the store
	// holds neither (offsets do not count: they are never removed). Safe
	// for concurrent use; it takes no transaction of the caller's.
	Oldest(ctx context.Context) (oldest time.Time, ok bool, err error)
}
