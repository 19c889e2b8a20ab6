package memory

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/outboxrelay/outbox"
)

// Compile-time checks that Backend implements the SPI and its optional
// interfaces.
var (
	_ outbox.Backend[*Tx] = (*Backend)(nil)
	_ outbox.Notifier     = (*Backend)(nil)
	_ outbox.Canceler     = (*Backend)(nil)
	_ outbox.Inspector    = (*Backend)(nil)
	_ outbox.Membership   = (*Backend)(nil)
	_ outbox.Prefetcher   = (*Backend)(nil)
	_ outbox.Looker       = (*Backend)(nil)

	_ outbox.PartitionInspector = (*Backend)(nil)
	_ outbox.Lister             = (*Backend)(nil)
	_ outbox.Pauser             = (*Backend)(nil)
	_ outbox.MemberLister       = (*Backend)(nil)
	_ outbox.ParkedPurger       = (*Backend)(nil)
)

// Options configure a [Backend]. The zero value is ready to use.
type Options struct {
	// Partitions is the number of partitions entries are spread over
	// (see [outbox.Store.Partitions]). Default (zero): 1. Negative values
	// make New panic.
	Partitions int
	// Now is the clock used for CreatedAt, due times and lease expiry.
	// Default (nil): time.Now. Tests inject a fake clock here so nothing
	// has to sleep.
	Now func() time.Time
	// Limits are rules checked at append (a payload size limit, a topic
	// rule; see [outbox.Limits]): an entry that breaks one is rejected
	// with an error wrapping [outbox.ErrInvalidEntry] and nothing of the
	// call is appended. For Kafka, use kafkasink.Limits. Default: the zero
	// value, which checks nothing (an oversized payload or an illegal
	// topic then fails at publish and the entry is parked).
	Limits outbox.Limits
	// KeySequence numbers the entries of each non-empty key 1, 2, 3, ...
	// in the [outbox.HeaderKeySeq] header (decimal), as the Postgres and
	// Redis backends' option of the same name does. Numbers are given at
	// [Tx.Commit], under the backend's lock, to the entries the commit
	// adds, in append order, so the committed entries of a key are
	// numbered without a gap or a repeat: a rolled-back Tx takes none, an
	// entry whose ID already exists takes none, an entry with an empty
	// Key gets none. A cancelled entry leaves a gap; a requeued or
	// retried entry keeps its number. The counters live as long as the
	// Backend (Close drops them with the entries). An entry that sets the
	// header itself is refused by AppendInTx with an error wrapping
	// [outbox.ErrInvalidEntry]. Default false: headers are left as given.
	KeySequence bool
}

// Backend is an in-memory [outbox.Backend] over [*Tx]. It also implements
// the optional interfaces listed in the package documentation. Create it
// with [New]; it is safe for concurrent use. It is not durable: see the
// package documentation.
type Backend struct {
	now    func() time.Time
	limits outbox.Limits // Options.Limits
	keySeq bool          // Options.KeySequence

	mu       sync.Mutex
	closed   bool
	seq      int64            // last append sequence number given out
	entries  map[string]*item // every unsent entry by ID
	parts    []*partition
	parked   map[string]*item // parked entries by ID
	sorted   []string         // parked IDs in order; valid only when !dirty
	dirty    bool
	subs     map[*subscriber]struct{}
	members  map[string]outbox.Member // relay fleet records by owner (Membership)
	keySeqs  map[string]int64         // last sequence number given per key (Options.KeySequence)
	imported int64                    // entries imported so far (their seq is importBase+n)
	topics   map[string]time.Time     // paused topics and since when (Pauser); shared with every partition

	held       bool          // Hold: FindPendingBatch returns nothing
	holdReason string        // the reason of the latest Hold
	holdSince  time.Time     // when the backend was first held; zero when not held
	sealed     bool          // Seal: appends fail with ErrSealed
	done       chan struct{} // closed by Close
}

// partition is the state of one partition: its lease and its entries that
// are pending (parked entries live in Backend.parked).
type partition struct {
	owner   string // lease holder; "" when released or never leased
	version int64  // version of the latest lease granted; only grows
	expires time.Time

	ready   readyHeap                     // pending, not claimed, not set aside
	held    map[string]map[*item]struct{} // set aside (held back by their key, or of a paused topic), by key
	failing map[string]map[*item]struct{} // attempted (Attempts > 0) or deferred, not parked, by key
	claimed map[*item]struct{}            // claimed by the latest lease granted

	// paused is when the partition was paused (Pauser); zero when it is
	// not.
	paused time.Time
	// topics is the Backend's map of paused topics (the same map).
	topics map[string]time.Time
	// pausedKeys holds, by key, the pending entries with a key whose topic
	// is paused: each holds back the later entries of its key. Entries
	// join it when their topic is paused or when they arrive (admit) while
	// it is, and leave it when it is resumed or they stop being pending.
	pausedKeys map[string]map[*item]struct{}
}

// New returns an empty in-memory backend configured by opts. It panics if
// opts.Partitions is negative.
func New(opts Options) *Backend {
	if opts.Partitions < 0 {
		panic(fmt.Sprintf("memory: Options.Partitions is %d; use 0 (one partition) or a positive count", opts.Partitions))
	}
	if opts.Partitions == 0 {
		opts.Partitions = 1
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	b := &Backend{
		now:     opts.Now,
		limits:  opts.Limits,
		keySeq:  opts.KeySequence,
		keySeqs: make(map[string]int64),
		entries: make(map[string]*item),
		parts:   make([]*partition, opts.Partitions),
		parked:  make(map[string]*item),
		subs:    make(map[*subscriber]struct{}),
		members: make(map[string]outbox.Member),
		topics:  make(map[string]time.Time),
		done:    make(chan struct{}),
	}
	for i := range b.parts {
		b.parts[i] = &partition{
			held:       make(map[string]map[*item]struct{}),
			failing:    make(map[string]map[*item]struct{}),
			claimed:    make(map[*item]struct{}),
			topics:     b.topics,
			pausedKeys: make(map[string]map[*item]struct{}),
		}
	}
	return b
}

// errClosed is returned by every method after Close.
var errClosed = fmt.Errorf("memory: backend is closed; create a new one with memory.New: %w", outbox.ErrClosed)

// lock locks b and checks that b is open, then that ctx is not done. On error b is left
// unlocked; on success the caller must unlock b.mu.
func (b *Backend) lock(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		b.mu.Unlock()
		return err
	}
	return nil
}

// clock returns the time now without its monotonic reading. Every time the
// heap compares (now, NotBefore, RetryAt) is stripped of it, so all
// comparisons use the wall clock alike and the heap order stays consistent
// even if some of those times carry a monotonic reading and others do not.
func (b *Backend) clock() time.Time {
	return b.now().Round(0)
}

// Partitions reports the number of partitions, fixed at New. It is safe
// for concurrent use and keeps working after Close.
func (b *Backend) Partitions() int { return len(b.parts) }

// Close closes the backend: every later call returns an error wrapping
// [outbox.ErrClosed], notification channels are closed and the stored
// entries are dropped. Close is idempotent and always returns nil.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	close(b.done)
	for s := range b.subs {
		close(s.ch)
		delete(b.subs, s)
	}
	b.entries, b.parked, b.sorted, b.keySeqs, b.topics = nil, nil, nil, nil, nil
	for i := range b.parts {
		b.parts[i] = &partition{}
	}
	return nil
}

// partition returns partition i or an error wrapping
// [outbox.ErrInvalidArgument] when i is out of range.
func (b *Backend) partition(i int) (*partition, error) {
	if err := outbox.CheckPartition(len(b.parts), i); err != nil {
		return nil, fmt.Errorf("memory: %w", err)
	}
	return b.parts[i], nil
}
