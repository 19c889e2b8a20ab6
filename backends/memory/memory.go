package memory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
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
// [outbox.Notifier], [outbox.Canceler] and [outbox.Inspector]. Create it
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
	held    map[string]map[*item]struct{} // set aside behind a failing entry, by key
	failing map[string]map[*item]struct{} // Attempts > 0, not parked, by key
	claimed map[*item]struct{}            // claimed by the latest lease granted
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
		done:    make(chan struct{}),
	}
	for i := range b.parts {
		b.parts[i] = &partition{
			held:    make(map[string]map[*item]struct{}),
			failing: make(map[string]map[*item]struct{}),
			claimed: make(map[*item]struct{}),
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
	b.entries, b.parked, b.sorted, b.keySeqs = nil, nil, nil, nil
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

// live reports whether p's lease is held and unexpired at now.
func (p *partition) live(now time.Time) bool {
	return p.owner != "" && now.Before(p.expires)
}

// fence returns the partition of lease if lease is its live lease at now,
// else an error wrapping [outbox.ErrLeaseLost] (or
// [outbox.ErrInvalidArgument] for a partition out of range). b.mu must be
// held.
func (b *Backend) fence(lease outbox.Lease, now time.Time) (*partition, error) {
	p, err := b.partition(lease.Partition)
	if err != nil {
		return nil, err
	}
	if p.owner == "" || p.owner != lease.Owner || p.version != lease.Version || !p.live(now) {
		return nil, fmt.Errorf("memory: lease on partition %d is no longer held by %q at version %d (it expired, was taken over or was released); acquire the partition again: %w",
			lease.Partition, lease.Owner, lease.Version, outbox.ErrLeaseLost)
	}
	return p, nil
}

// AcquireLease grants owner the lease on partition for ttl, extends it if
// owner already holds it (keeping its Version), or returns an error
// wrapping [outbox.ErrLeaseHeld] if another owner holds an unexpired lease.
// A newly granted lease has the partition's version counter plus one, and
// the claims of every earlier lease go back to pending in their original
// order. An empty owner, a ttl that is not positive or a partition out of
// range gives an error wrapping [outbox.ErrInvalidArgument].
func (b *Backend) AcquireLease(ctx context.Context, partition int, owner string, ttl time.Duration) (outbox.Lease, error) {
	if err := b.lock(ctx); err != nil {
		return outbox.Lease{}, err
	}
	defer b.mu.Unlock()
	if err := outbox.CheckAcquire(len(b.parts), partition, owner, ttl); err != nil {
		return outbox.Lease{}, fmt.Errorf("memory: AcquireLease: %w", err)
	}
	p := b.parts[partition]
	now := b.clock()
	if p.live(now) {
		if p.owner != owner {
			return outbox.Lease{}, fmt.Errorf("memory: partition %d is leased by %q until %v; retry after it expires or is released: %w",
				partition, p.owner, p.expires, outbox.ErrLeaseHeld)
		}
		p.expires = now.Add(ttl)
		return outbox.Lease{Partition: partition, Owner: owner, Version: p.version, Expires: p.expires}, nil
	}
	p.returnClaims()
	p.version++
	p.owner = owner
	p.expires = now.Add(ttl)
	return outbox.Lease{Partition: partition, Owner: owner, Version: p.version, Expires: p.expires}, nil
}

// RenewLease extends lease by ttl from now if lease.Owner still holds it
// at lease.Version and it has not expired; otherwise it changes nothing and
// returns an error wrapping [outbox.ErrLeaseLost]. A ttl that is not
// positive gives an error wrapping [outbox.ErrInvalidArgument].
func (b *Backend) RenewLease(ctx context.Context, lease outbox.Lease, ttl time.Duration) (outbox.Lease, error) {
	if err := b.lock(ctx); err != nil {
		return outbox.Lease{}, err
	}
	defer b.mu.Unlock()
	if err := outbox.CheckRenew(len(b.parts), lease, ttl); err != nil {
		return outbox.Lease{}, fmt.Errorf("memory: RenewLease: %w", err)
	}
	now := b.clock()
	p, err := b.fence(lease, now)
	if err != nil {
		return outbox.Lease{}, err
	}
	p.expires = now.Add(ttl)
	lease.Expires = p.expires
	return lease, nil
}

// ReleaseLease frees the partition if lease.Owner holds its live lease at
// lease.Version, returning the lease's unfinished claims to pending. It is
// a no-op returning nil otherwise (expired, taken over or already
// released). A partition out of range gives an error wrapping
// [outbox.ErrInvalidArgument].
func (b *Backend) ReleaseLease(ctx context.Context, lease outbox.Lease) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	p, err := b.partition(lease.Partition)
	if err != nil {
		return err
	}
	if lease.Owner == "" || p.owner != lease.Owner || p.version != lease.Version || !p.live(b.clock()) {
		return nil
	}
	p.owner = ""
	p.expires = time.Time{}
	p.returnClaims()
	return nil
}

// returnClaims puts every claimed entry of p back into the heap, where it
// takes its original place (next attempt time and append order are kept).
func (p *partition) returnClaims() {
	for it := range p.claimed {
		delete(p.claimed, it)
		it.state = stateReady
		p.ready.push(it)
	}
}

// FindPendingBatch claims up to limit due, eligible entries of
// lease.Partition in (next attempt time, append order) and returns deep
// copies of them. It skips entries held back behind a failing entry of
// their key and does not return entries already claimed. It returns an
// error wrapping [outbox.ErrInvalidArgument] if limit is not positive and
// one wrapping [outbox.ErrLeaseLost] if lease is not live; then nothing
// changes.
func (b *Backend) FindPendingBatch(ctx context.Context, lease outbox.Lease, limit int) ([]outbox.Entry, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	if err := outbox.CheckFetch(len(b.parts), lease, limit); err != nil {
		return nil, fmt.Errorf("memory: FindPendingBatch: %w", err)
	}
	now := b.clock()
	p, err := b.fence(lease, now)
	if err != nil {
		return nil, err
	}
	if b.held {
		return nil, nil
	}
	var out []outbox.Entry
	for len(out) < limit && len(p.ready) > 0 && !p.ready[0].due.After(now) {
		it := p.ready.pop()
		if p.heldBack(it) {
			it.state = stateHeld
			addTo(p.held, it)
			continue
		}
		it.state = stateClaimed
		p.claimed[it] = struct{}{}
		if out == nil {
			out = make([]outbox.Entry, 0, min(limit, len(p.ready)+1))
		}
		out = append(out, it.e.Clone())
	}
	return out, nil
}

// FetchNext claims the batch behind inFlight, the lease's unfinished
// claims, while they are still in flight (see [outbox.Prefetcher]). This
// backend never returns a claimed entry again, so FetchNext is
// FindPendingBatch: a claimed entry that was attempted keeps holding back
// the later entries of its key, and one that was not holds back nothing.
// It parks nothing (what this backend holds always decodes), so
// Batch.Parked is empty.
func (b *Backend) FetchNext(ctx context.Context, lease outbox.Lease, limit int, inFlight []outbox.Entry) (outbox.Batch, error) {
	entries, err := b.FindPendingBatch(ctx, lease, limit)
	return outbox.Batch{Entries: entries}, err
}

// heldBack reports whether an entry of its key appended earlier is
// failing.
func (p *partition) heldBack(it *item) bool {
	if it.e.Key == "" {
		return false
	}
	for f := range p.failing[it.e.Key] {
		if f.seq < it.seq {
			return true
		}
	}
	return false
}

// addTo adds it to the set of its key in m.
func addTo(m map[string]map[*item]struct{}, it *item) {
	set := m[it.e.Key]
	if set == nil {
		set = make(map[*item]struct{})
		m[it.e.Key] = set
	}
	set[it] = struct{}{}
}

// removeFrom removes it from the set of its key in m and reports whether
// it was there.
func removeFrom(m map[string]map[*item]struct{}, it *item) bool {
	set := m[it.e.Key]
	if _, ok := set[it]; !ok {
		return false
	}
	delete(set, it)
	if len(set) == 0 {
		delete(m, it.e.Key)
	}
	return true
}

// detach takes a pending item out of whatever structure of p holds it.
// Parked items are handled by the caller.
func (p *partition) detach(it *item) {
	switch it.state {
	case stateReady:
		p.ready.remove(it.index)
	case stateHeld:
		removeFrom(p.held, it)
	case stateClaimed:
		delete(p.claimed, it)
	}
}

// stopFailing records that it no longer fails (sent, parked or cancelled)
// and moves the entries of its key that it alone held back to the heap.
func (p *partition) stopFailing(it *item) {
	if it.e.Key == "" || !removeFrom(p.failing, it) {
		return
	}
	for h := range p.held[it.e.Key] {
		if !p.heldBack(h) {
			removeFrom(p.held, h)
			h.state = stateReady
			p.ready.push(h)
		}
	}
}

// MarkSent deletes the entries with the given IDs from lease.Partition.
// IDs that are unknown, already sent or of another partition are ignored.
// An empty ids returns nil without checking the lease; otherwise a lease
// that is not live gives an error wrapping [outbox.ErrLeaseLost] and
// nothing changes. ids is not retained.
func (b *Backend) MarkSent(ctx context.Context, lease outbox.Lease, ids []string) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	p, err := b.fence(lease, b.clock())
	if err != nil {
		return err
	}
	for _, id := range ids {
		it := b.entries[id]
		if it == nil || it.e.Partition != lease.Partition {
			continue
		}
		b.remove(p, it)
	}
	return nil
}

// remove deletes it from the backend, wherever it is.
func (b *Backend) remove(p *partition, it *item) {
	if it.state == stateParked {
		delete(b.parked, it.e.ID)
		b.dirty = true
	} else {
		p.detach(it)
		p.stopFailing(it)
	}
	delete(b.entries, it.e.ID)
}

// MarkFailed records failed attempts on entries of lease.Partition: each
// entry's Attempts grows by one and LastError becomes Error (kept in
// full); then the entry is parked (Park) or pending again, due Delay after
// the backend's clock (Options.Now) in its original append order. IDs that are unknown, already sent, parked
// or of another partition are ignored, so a sent entry never comes back.
// An empty failures returns nil without checking the lease; otherwise a
// lease that is not live gives an error wrapping [outbox.ErrLeaseLost] and
// nothing changes. failures is not retained.
func (b *Backend) MarkFailed(ctx context.Context, lease outbox.Lease, failures []outbox.Failure) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if len(failures) == 0 {
		return nil
	}
	p, err := b.fence(lease, b.clock())
	if err != nil {
		return err
	}
	for _, f := range failures {
		it := b.entries[f.ID]
		if it == nil || it.e.Partition != lease.Partition || it.state == stateParked {
			continue
		}
		p.detach(it)
		it.e.Attempts++
		it.e.LastError = strings.Clone(f.Error)
		if f.Park {
			p.stopFailing(it)
			it.state = stateParked
			b.parked[it.e.ID] = it
			b.dirty = true
			continue
		}
		if it.e.Key != "" {
			addTo(p.failing, it)
		}
		it.due = b.clock().Add(f.Delay)
		it.state = stateReady
		p.ready.push(it)
	}
	return nil
}

// Release returns entries claimed on lease.Partition to pending unchanged
// (attempts, last error, next attempt time and order). IDs that are
// unknown, not claimed or of another partition are ignored. An empty ids
// returns nil without checking the lease; otherwise a lease that is not
// live gives an error wrapping [outbox.ErrLeaseLost] and nothing changes.
// ids is not retained.
func (b *Backend) Release(ctx context.Context, lease outbox.Lease, ids []string) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	p, err := b.fence(lease, b.clock())
	if err != nil {
		return err
	}
	for _, id := range ids {
		it := b.entries[id]
		if it == nil || it.e.Partition != lease.Partition || it.state != stateClaimed {
			continue
		}
		delete(p.claimed, it)
		it.state = stateReady
		p.ready.push(it)
	}
	return nil
}

// Cancel deletes the entry with the given ID if it is pending (scheduled,
// due, retrying, held back or claimed) or parked. It returns an error
// wrapping [outbox.ErrNotFound] if there is no such entry. A relay that
// claimed the entry before may still publish it; its MarkSent or
// MarkFailed is then ignored.
func (b *Backend) Cancel(ctx context.Context, id string) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	it := b.entries[id]
	if it == nil {
		return fmt.Errorf("memory: no pending or parked entry has ID %q (never appended, already sent or cancelled): %w", id, outbox.ErrNotFound)
	}
	b.remove(b.parts[it.e.Partition], it)
	return nil
}

// Stats reports the counts at one moment. Pending counts every unsent,
// unparked entry (scheduled, due, retrying, held back and claimed); Due
// and OldestDue cover those among them whose next attempt time has come,
// claimed and held-back entries included.
func (b *Backend) Stats(ctx context.Context) (outbox.Stats, error) {
	if err := b.lock(ctx); err != nil {
		return outbox.Stats{}, err
	}
	defer b.mu.Unlock()
	now := b.clock()
	s := outbox.Stats{Parked: int64(len(b.parked))}
	for _, p := range b.parts {
		p.addStats(&s, now)
	}
	return s, nil
}

// PartitionStats reports the counts (as [Backend.Stats] defines them) and
// the live lease of every partition at one moment. See
// [outbox.PartitionInspector].
func (b *Backend) PartitionStats(ctx context.Context) ([]outbox.PartitionStats, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	now := b.clock()
	out := make([]outbox.PartitionStats, len(b.parts))
	for i, p := range b.parts {
		out[i].Partition = i
		p.addStats(&out[i].Stats, now)
		if p.live(now) {
			out[i].Lease = outbox.Lease{Partition: i, Owner: p.owner, Version: p.version, Expires: p.expires}
		}
	}
	for _, it := range b.parked {
		out[it.e.Partition].Parked++
	}
	return out, nil
}

// addStats adds p's pending entries (not its parked ones) to s.
func (p *partition) addStats(s *outbox.Stats, now time.Time) {
	note := func(due time.Time, n int64) {
		if n == 0 {
			return
		}
		s.Due += n
		if s.OldestDue.IsZero() || due.Before(s.OldestDue) {
			s.OldestDue = due
		}
	}
	s.Pending += int64(len(p.ready) + len(p.claimed))
	n, first := p.ready.countDue(now)
	note(first, n)
	for _, set := range p.held {
		s.Pending += int64(len(set))
		for it := range set {
			if !it.due.After(now) {
				note(it.due, 1)
			}
		}
	}
	for it := range p.claimed {
		if !it.due.After(now) {
			note(it.due, 1)
		}
	}
}

// Lookup returns the pending or parked entry with the given ID. See
// [outbox.Looker].
func (b *Backend) Lookup(ctx context.Context, id string) (outbox.EntryInfo, error) {
	if err := b.lock(ctx); err != nil {
		return outbox.EntryInfo{}, err
	}
	defer b.mu.Unlock()
	it := b.entries[id]
	if it == nil {
		return outbox.EntryInfo{}, fmt.Errorf("memory: no pending or parked entry has ID %q (never appended, already sent or cancelled): %w", id, outbox.ErrNotFound)
	}
	info := outbox.EntryInfo{Entry: it.e.Clone(), Parked: it.state == stateParked}
	if !info.Parked {
		info.DueAt = it.due
	}
	return info, nil
}

// Parked lists parked entries ordered by ID, starting after the ID after
// ("" for the first page), at most limit of them. A limit that is not
// positive gives an error wrapping [outbox.ErrInvalidArgument]. The
// returned entries are copies owned by the caller.
func (b *Backend) Parked(ctx context.Context, after string, limit int) ([]outbox.Entry, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	if limit <= 0 {
		return nil, fmt.Errorf("memory: Parked limit is %d; it must be positive: %w", limit, outbox.ErrInvalidArgument)
	}
	if b.dirty {
		b.sorted = b.sorted[:0]
		for id := range b.parked {
			b.sorted = append(b.sorted, id)
		}
		slices.Sort(b.sorted)
		b.dirty = false
	}
	i, found := slices.BinarySearch(b.sorted, after)
	if found {
		i++
	}
	var out []outbox.Entry
	for _, id := range b.sorted[i:min(i+limit, len(b.sorted))] {
		out = append(out, b.parked[id].e.Clone())
	}
	return out, nil
}

// Requeue moves the parked entries with the given IDs back to pending, due
// now, with Attempts reset to 0 and LastError kept. A requeued entry is
// ordered as if appended now: it gets a new append sequence number, so it
// comes after the entries already due (entries requeued by one call keep
// their original order among themselves). IDs that are not parked are
// ignored. It reports how many entries it requeued. A parked entry without
// a topic (only [Backend.Import] stores one) stays parked: the others are
// requeued and their count comes with an [*outbox.RequeueRefusedError]
// naming it.
func (b *Backend) Requeue(ctx context.Context, ids ...string) (int, error) {
	if err := b.lock(ctx); err != nil {
		return 0, err
	}
	defer b.mu.Unlock()
	var items []*item
	var refused *outbox.RequeueRefusedError
	for _, id := range ids {
		it := b.parked[id]
		if it == nil {
			continue
		}
		if it.e.Topic == "" {
			// Only Import stores an entry without a topic (parked).
			if refused == nil {
				refused = &outbox.RequeueRefusedError{}
			}
			refused.Refused = append(refused.Refused, outbox.Refusal{ID: id, Reason: "it has no topic (it was imported parked without one)"})
			continue
		}
		delete(b.parked, id)
		b.dirty = true
		items = append(items, it)
	}
	slices.SortFunc(items, func(x, y *item) int { return cmp.Compare(x.seq, y.seq) })
	now := b.clock()
	for _, it := range items {
		b.seq++
		it.seq = b.seq
		it.e.Attempts = 0
		it.due = now
		it.state = stateReady
		b.parts[it.e.Partition].ready.push(it)
	}
	if refused != nil {
		return len(items), fmt.Errorf("memory: Requeue: %w", refused)
	}
	return len(items), nil
}

// subscriber is one Notifications channel.
type subscriber struct {
	ch chan int
}

// notifyBuffer is the buffer of each Notifications channel.
const notifyBuffer = 256

// Notifications returns a channel that receives, without blocking, the
// partitions of each commit that added at least one new entry: one value
// per partition appended to. Its buffer holds 256 values; when it is full,
// further values are dropped (the relay's polling finds those entries).
// It is closed when ctx is done or the backend is closed. Any number of
// subscribers may exist at once.
func (b *Backend) Notifications(ctx context.Context) (<-chan int, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	s := &subscriber{ch: make(chan int, notifyBuffer)}
	b.subs[s] = struct{}{}
	go func() {
		select {
		case <-ctx.Done():
		case <-b.done:
			return // Close closed the channel.
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if _, ok := b.subs[s]; ok {
			delete(b.subs, s)
			close(s.ch)
		}
	}()
	return s.ch, nil
}

// notify sends partitions to every subscriber without blocking. b.mu must
// be held.
func (b *Backend) notify(partitions []int) {
	for s := range b.subs {
		for _, p := range partitions {
			select {
			case s.ch <- p:
			default:
			}
		}
	}
}

// Heartbeat records m as a live relay until ttl after the backend's clock,
// drops expired records and returns the live ones sorted by owner. See
// [outbox.Membership].
func (b *Backend) Heartbeat(ctx context.Context, m outbox.Member, ttl time.Duration) ([]outbox.Member, error) {
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.mu.Unlock()
	if err := outbox.CheckMember(len(b.parts), m, ttl); err != nil {
		return nil, fmt.Errorf("memory: Heartbeat: %w", err)
	}
	now := b.clock()
	m.Partitions = slices.Clone(m.Partitions)
	m.Expires = now.Add(ttl)
	b.members[m.Owner] = m
	out := make([]outbox.Member, 0, len(b.members))
	for owner, rec := range b.members {
		if !now.Before(rec.Expires) {
			delete(b.members, owner)
			continue
		}
		rec.Partitions = slices.Clone(rec.Partitions)
		out = append(out, rec)
	}
	slices.SortFunc(out, func(x, y outbox.Member) int { return strings.Compare(x.Owner, y.Owner) })
	return out, nil
}

// Leave deletes the record of owner. See [outbox.Membership].
func (b *Backend) Leave(ctx context.Context, owner string) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.mu.Unlock()
	delete(b.members, owner)
	return nil
}
