package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
)

// Relay moves entries from a [Store] to a [Sink]: at least once, in
// per-key order, with retries, backoff, parking and scheduled delivery.
//
// A relay runs one worker per partition it may lease. A worker acquires the
// partition's lease, fetches a bounded batch of due entries, publishes it
// and records each outcome, and repeats while work remains; when the
// partition is idle it waits for a notification ([Relay.Notify], or the
// store's [Notifier]) or the poll interval.
//
// Publishing keeps per-key order: a batch is published in rounds, each
// holding at most one entry per key (entries without a key all go in the
// first round), so the sink never has two entries of a key in flight. When
// an entry fails, the later entries of its key in the batch are not
// attempted; they are released back to the store, where the failed entry
// holds them back until it is sent or parked.
//
// Leases: before each round the worker checks how much of its lease is
// left; it renews once less than RenewMargin is left and abandons the batch
// the moment renewal reports the lease lost. A round's publish is bounded
// by the lease's local deadline. Stop releases every lease.
//
// Failures are classified by [github.com/outboxrelay/outbox/backoff.ClassOf]:
// permanent failures and entries out of attempts are parked, others are
// re-scheduled after the backoff policy's delay. A circuit breaker stops
// publishing while the sink fails every message, so an outage does not burn
// attempts.
//
// Several relays may run against one outbox: each partition is relayed by
// one lease holder at a time. A Relay is safe for concurrent use.
type Relay struct {
	store   Store
	sink    Sink
	opts    RelayOptions
	log     *slog.Logger
	metrics *relayMetrics
	tracer  trace.Tracer
	breaker breaker

	wakeMu sync.Mutex
	wake   chan struct{}

	mu       sync.Mutex
	started  bool
	stopping context.CancelFunc // stops fetching
	hard     context.CancelFunc // cancels in-flight publishing and marks
	done     chan struct{}      // closed when every worker has exited

	slots chan struct{} // MaxPartitions semaphore, nil when unlimited
	// slotFreed is closed (and replaced) whenever a slot is given back, so
	// workers that found no free slot try again at once instead of
	// sleeping AcquireInterval: relays sharing partitions settle in a few
	// round trips.
	slotMu    sync.Mutex
	slotFreed chan struct{}

	published, retried, parked, batches, leaseLosses, held atomic.Int64
}

// RelayStats are cumulative counters of one [Relay].
type RelayStats struct {
	// Published counts entries the sink acknowledged.
	Published int64
	// Retried counts failed attempts that were re-scheduled.
	Retried int64
	// Parked counts entries parked (permanent failure or out of attempts).
	Parked int64
	// Batches counts fetched, non-empty batches.
	Batches int64
	// LeaseLosses counts leases lost while held.
	LeaseLosses int64
	// PartitionsHeld is the number of partitions leased right now.
	PartitionsHeld int64
}

// NewRelay returns a relay from store to sink. It checks opts and reports
// every bad setting at once.
func NewRelay(store Store, sink Sink, opts RelayOptions) (*Relay, error) {
	if store == nil || sink == nil {
		return nil, errors.New("outbox: NewRelay needs a non-nil store and sink")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	n := store.Partitions()
	if n < 1 {
		return nil, fmt.Errorf("outbox: the store reports %d partitions; it must have at least 1", n)
	}
	if o.Partitions == nil {
		o.Partitions = make([]int, n)
		for i := range o.Partitions {
			o.Partitions[i] = i
		}
	}
	seen := make(map[int]bool, len(o.Partitions))
	for _, p := range o.Partitions {
		if p < 0 || p >= n || seen[p] {
			return nil, fmt.Errorf("outbox: RelayOptions.Partitions has %d, which is out of range [0, %d) or repeated", p, n)
		}
		seen[p] = true
	}
	r := &Relay{
		store: store,
		sink:  sink,
		opts:  o,
		log:   o.Logger.With("component", "outbox.relay", "owner", o.Owner),
		wake:  make(chan struct{}),
	}
	r.breaker.threshold = o.BreakerThreshold
	r.breaker.cooldown = o.BreakerCooldown
	if o.MaxPartitions > 0 && o.MaxPartitions < len(o.Partitions) {
		r.slots = make(chan struct{}, o.MaxPartitions)
		r.slotFreed = make(chan struct{})
	}
	r.tracer = o.TracerProvider.Tracer("github.com/outboxrelay/outbox")
	r.metrics, err = newRelayMetrics(o.MeterProvider, r)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Start starts relaying in the background and returns at once. When ctx is
// done the relay stops as if Stop had been called with no deadline; call
// Stop to wait for it. Start may be called once; it returns an error
// wrapping [ErrClosed] after that.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return fmt.Errorf("%w: Relay.Start called twice", ErrClosed)
	}
	r.started = true
	runCtx, stopping := context.WithCancel(context.WithoutCancel(ctx))
	hardCtx, hard := context.WithCancel(context.WithoutCancel(ctx))
	r.stopping, r.hard = stopping, hard
	r.done = make(chan struct{})

	var wg sync.WaitGroup
	for _, p := range r.opts.Partitions {
		w := &worker{r: r, partition: p}
		wg.Go(func() { w.run(runCtx, hardCtx) })
	}
	if n, ok := r.store.(Notifier); ok {
		wg.Go(func() { r.listen(runCtx, n) })
	}
	go func() {
		select {
		case <-ctx.Done():
			stopping()
		case <-runCtx.Done():
		}
	}()
	go func() {
		wg.Wait()
		hard()
		close(r.done)
	}()
	r.log.Info("outbox relay started", "partitions", len(r.opts.Partitions))
	return nil
}

// Stop stops fetching, waits for the batches in flight to finish (publish
// and mark) and releases the leases. If ctx ends first, in-flight
// publishing is cancelled, Stop returns ctx's error and leases not yet
// released expire on their own. Stop is idempotent; Stop before Start
// returns nil.
func (r *Relay) Stop(ctx context.Context) error {
	r.mu.Lock()
	if !r.started {
		r.started = true // a later Start fails
		r.mu.Unlock()
		return nil
	}
	stopping, hard, done := r.stopping, r.hard, r.done
	r.mu.Unlock()

	stopping()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		hard()
		return ctx.Err()
	}
}

// Run starts the relay and blocks until ctx is done, then stops it,
// waiting for in-flight batches at most LeaseTTL. It returns nil after a
// clean stop.
func (r *Relay) Run(ctx context.Context) error {
	if err := r.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.LeaseTTL)
	defer cancel()
	return r.Stop(stopCtx)
}

// Notify wakes the relay's idle partition workers now, as a backend
// notification would: call it after committing a transaction that appended
// entries to cut the commit-to-publish latency. It never blocks.
func (r *Relay) Notify() {
	r.wakeMu.Lock()
	close(r.wake)
	r.wake = make(chan struct{})
	r.wakeMu.Unlock()
}

func (r *Relay) wakeChan() <-chan struct{} {
	r.wakeMu.Lock()
	defer r.wakeMu.Unlock()
	return r.wake
}

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{
		Published:      r.published.Load(),
		Retried:        r.retried.Load(),
		Parked:         r.parked.Load(),
		Batches:        r.batches.Load(),
		LeaseLosses:    r.leaseLosses.Load(),
		PartitionsHeld: r.held.Load(),
	}
}

// Owner returns the relay's lease owner token.
func (r *Relay) Owner() string { return r.opts.Owner }

// listen turns the store's notifications into Notify calls, resubscribing
// when the channel closes while the relay runs.
func (r *Relay) listen(ctx context.Context, n Notifier) {
	retry := r.opts.PollInterval
	for ctx.Err() == nil {
		ch, err := n.Notifications(ctx)
		if err != nil {
			r.log.Warn("outbox relay: subscribing to notifications failed; polling meanwhile", "err", err)
			if !sleep(ctx, retry) {
				return
			}
			continue
		}
		for range ch {
			r.Notify()
		}
		if !sleep(ctx, retry) {
			return
		}
	}
}

// waitOrFreed waits d, until freed is closed (a nil freed never is) or
// until ctx is done; it reports whether ctx is still live.
func waitOrFreed(ctx context.Context, d time.Duration, freed <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-freed:
		return true
	case <-ctx.Done():
		return false
	}
}

// sleep waits d or until ctx is done; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// worker relays one partition.
type worker struct {
	r         *Relay
	partition int

	lease      Lease
	holding    bool
	validUntil time.Time // local deadline of the lease: ask time + TTL
	slot       bool
}

func (w *worker) run(ctx, hardCtx context.Context) {
	r := w.r
	defer w.drop(hardCtx, true)
	for ctx.Err() == nil {
		if !w.holding {
			if ok, freed := w.acquire(hardCtx); !ok {
				// Not woken by notifications: a partition another relay
				// holds would otherwise cost an AcquireLease per commit.
				// A worker that found no free slot (MaxPartitions) is
				// woken when one is given back; one that tried its
				// partition waits the whole interval, so every worker
				// asks the store at most once per AcquireInterval.
				if !waitOrFreed(ctx, r.opts.AcquireInterval, freed) {
					return
				}
				continue
			}
		}
		if !w.keep(hardCtx) {
			// Renewal failed but the lease may still be ours: pause
			// before asking again rather than hammering the store.
			if w.holding && !w.idle(ctx, max(r.opts.PollInterval/4, 10*time.Millisecond)) {
				return
			}
			continue
		}
		if wait := r.breaker.wait(r.opts.Now()); wait > 0 {
			w.idle(ctx, min(wait, w.renewIn()))
			continue
		}
		wake := r.wakeChan()
		batch, err := r.store.FindPendingBatch(hardCtx, w.lease, r.opts.BatchSize)
		switch {
		case errors.Is(err, ErrLeaseLost):
			w.lost(err)
			continue
		case err != nil:
			if hardCtx.Err() != nil {
				return
			}
			r.log.Warn("outbox relay: fetching a batch failed", "partition", w.partition, "err", err)
			w.idle(ctx, min(r.opts.PollInterval, w.renewIn()))
			continue
		case len(batch) == 0:
			w.waitWork(ctx, wake)
			continue
		}
		r.batches.Add(1)
		w.process(hardCtx, batch)
	}
}

// idle waits d, a wake-up or the end of ctx; it reports whether ctx is live.
func (w *worker) idle(ctx context.Context, d time.Duration) bool {
	return w.waitOn(ctx, w.r.wakeChan(), d)
}

func (w *worker) waitWork(ctx context.Context, wake <-chan struct{}) {
	w.waitOn(ctx, wake, min(w.r.opts.PollInterval, w.renewIn()))
}

func (w *worker) waitOn(ctx context.Context, wake <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wake:
	case <-ctx.Done():
		return false
	}
	return true
}

// renewIn is how long until the held lease needs renewal (PollInterval when
// none is held).
func (w *worker) renewIn() time.Duration {
	if !w.holding {
		return w.r.opts.PollInterval
	}
	return max(w.validUntil.Sub(w.r.opts.Now())-w.r.opts.RenewMargin, time.Millisecond)
}

// acquire tries to lease the partition; it reports success.
//
// When it returns false without asking the store because every slot is
// taken, freed is closed as soon as a slot is given back (nil otherwise).
func (w *worker) acquire(ctx context.Context) (ok bool, freed <-chan struct{}) {
	r := w.r
	if r.slots != nil && !w.slot {
		r.slotMu.Lock()
		freed = r.slotFreed // taken before trying, so no release is missed
		r.slotMu.Unlock()
		select {
		case r.slots <- struct{}{}:
			w.slot = true
		default:
			return false, freed
		}
	}
	asked := r.opts.Now()
	l, err := r.store.AcquireLease(ctx, w.partition, r.opts.Owner, r.opts.LeaseTTL)
	if err == nil {
		// The store extends, at the same version, a lease this owner
		// already holds: one this worker abandoned after a failed write,
		// or one a previous run with the same Owner left behind. Entries
		// still claimed under that version would stay claimed, so start
		// over: a release returns them, and the acquire after it gets a
		// new version. It costs two round trips per acquisition.
		if err = r.store.ReleaseLease(ctx, l); err == nil {
			asked = r.opts.Now()
			l, err = r.store.AcquireLease(ctx, w.partition, r.opts.Owner, r.opts.LeaseTTL)
		}
	}
	if err != nil {
		if !errors.Is(err, ErrLeaseHeld) && ctx.Err() == nil {
			r.log.Warn("outbox relay: acquiring a lease failed", "partition", w.partition, "err", err)
		}
		w.freeSlot()
		return false, nil
	}
	w.lease, w.holding, w.validUntil = l, true, asked.Add(r.opts.LeaseTTL)
	r.held.Add(1)
	r.log.Debug("outbox relay: lease acquired", "partition", w.partition, "version", l.Version)
	return true, nil
}

// keep renews the lease when less than RenewMargin is left; it reports
// whether the lease is still held with more than RenewMargin left.
func (w *worker) keep(ctx context.Context) bool {
	r := w.r
	if w.validUntil.Sub(r.opts.Now()) >= r.opts.RenewMargin {
		return true
	}
	asked := r.opts.Now()
	l, err := r.store.RenewLease(ctx, w.lease, r.opts.LeaseTTL)
	switch {
	case err == nil:
		w.lease, w.validUntil = l, asked.Add(r.opts.LeaseTTL)
		return true
	case errors.Is(err, ErrLeaseLost):
		w.lost(err)
		return false
	default:
		if ctx.Err() == nil {
			r.log.Warn("outbox relay: renewing a lease failed", "partition", w.partition, "err", err)
		}
		if !w.validUntil.After(r.opts.Now()) {
			// Expired locally: whatever the store thinks, stop acting on it.
			w.drop(ctx, false)
		}
		return false
	}
}

// lost forgets a lease the store says is gone.
func (w *worker) lost(err error) {
	w.r.leaseLosses.Add(1)
	w.r.metrics.leaseLost(w.partition)
	w.r.log.Warn("outbox relay: lease lost", "partition", w.partition, "version", w.lease.Version, "err", err)
	w.drop(nil, false)
}

// drop forgets the held lease, releasing it in the store when release is
// set and ctx allows.
func (w *worker) drop(ctx context.Context, release bool) {
	if !w.holding {
		w.freeSlot()
		return
	}
	if release && ctx != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if ctx.Err() != nil {
			// Hard stop: try briefly all the same; expiry is the fallback.
			cancel()
			rctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
		}
		if err := w.r.store.ReleaseLease(rctx, w.lease); err != nil {
			w.r.log.Warn("outbox relay: releasing a lease failed; it will expire", "partition", w.partition, "err", err)
		}
		cancel()
	}
	w.holding = false
	w.r.held.Add(-1)
	w.freeSlot()
}

func (w *worker) freeSlot() {
	if w.slot {
		r := w.r
		<-r.slots
		w.slot = false
		r.slotMu.Lock()
		close(r.slotFreed)
		r.slotFreed = make(chan struct{})
		r.slotMu.Unlock()
	}
}

// process publishes a batch in rounds and records every outcome once, at
// the end of the batch: one MarkSent, one MarkFailed and one Release at
// most, however many rounds the batch took. Entries it does not attempt are
// released. A crash or lease loss before the end republishes at most this
// batch.
func (w *worker) process(ctx context.Context, batch []Entry) {
	r := w.r
	rounds := planRounds(batch, r.opts.Unordered, r.opts.MaxInFlight)
	failedKeys := map[string]bool{}
	var out outcomes
	for i, round := range rounds {
		// Drop entries whose key failed earlier in this batch.
		live := round[:0:0]
		for _, e := range round {
			if e.Key != "" && failedKeys[e.Key] {
				out.skipped = append(out.skipped, e.ID)
				continue
			}
			live = append(live, e)
		}
		if len(live) == 0 {
			continue
		}
		ok, scale := w.mayPublish(ctx)
		if !ok {
			out.skipped = append(out.skipped, idsOf(live)...)
			for _, rest := range rounds[i+1:] {
				out.skipped = append(out.skipped, idsOf(rest)...)
			}
			break
		}
		w.publish(ctx, live, scale, failedKeys, &out)
	}
	if w.holding {
		w.record(ctx, &out)
	}
}

// outcomes are a batch's results waiting to be recorded.
type outcomes struct {
	sent     []string
	failures []Failure
	skipped  []string
}

// mayPublish checks the lease and the breaker before a round. It reports
// whether to go on and the backoff scale to use.
func (w *worker) mayPublish(ctx context.Context) (bool, float64) {
	r := w.r
	if ctx.Err() != nil || !w.keep(ctx) {
		return false, 0
	}
	allowed, probing := r.breaker.allow(r.opts.Now())
	if !allowed {
		return false, 0
	}
	if probing {
		return true, r.opts.BackpressureScale
	}
	return true, 1
}

// publish sends one round and adds its outcomes to out.
func (w *worker) publish(ctx context.Context, round []Entry, scale float64, failedKeys map[string]bool, out *outcomes) {
	r := w.r
	pctx, cancel := context.WithDeadline(ctx, w.validUntil)
	pctx, span := startPublishSpan(pctx, r.tracer, w.partition, round)
	start := time.Now()
	errs := r.sink.Publish(pctx, round)
	cancel()
	r.metrics.published(ctx, w.partition, time.Since(start))
	if len(errs) != len(round) {
		err := fmt.Errorf("outbox: the sink returned %d results for %d messages (a bug in the sink)", len(errs), len(round))
		errs = make([]error, len(round))
		for i := range errs {
			errs[i] = err
		}
	}

	now := r.opts.Now()
	failed, retryable := 0, 0
	for i, e := range round {
		err := errs[i]
		if err == nil {
			out.sent = append(out.sent, e.ID)
			continue
		}
		failed++
		attempts := e.Attempts + 1
		park, delay := r.opts.Backoff.Decide(attempts, err, scale)
		if !park {
			retryable++
		}
		out.failures = append(out.failures, Failure{
			ID:      e.ID,
			Error:   truncate(err.Error(), 4096),
			RetryAt: now.Add(delay),
			Park:    park,
		})
		if e.Key != "" && !r.opts.Unordered {
			failedKeys[e.Key] = true
		}
		r.log.Debug("outbox relay: publish failed", "partition", w.partition, "id", e.ID,
			"attempts", attempts, "park", park, "retry_in", delay, "err", err)
	}
	endPublishSpan(span, failed, failed-retryable)

	// A round in which every message failed with a retryable error says the
	// sink is down; anything else (even a permanent refusal) says it works.
	r.breaker.record(retryable < len(round), now)
}

// record writes a batch's outcomes: sent, then failed, then the untried
// entries released. A write that fails gives the lease up (see mark), and
// what was not recorded comes back to the next holder.
func (w *worker) record(ctx context.Context, out *outcomes) {
	r := w.r
	sent, failures := out.sent, out.failures
	if !w.mark(ctx, "MarkSent", func(ctx context.Context) error { return r.store.MarkSent(ctx, w.lease, sent) }, len(sent) > 0) {
		return
	}
	r.published.Add(int64(len(sent)))
	r.metrics.outcome(ctx, w.partition, "sent", len(sent))
	if !w.mark(ctx, "MarkFailed", func(ctx context.Context) error { return r.store.MarkFailed(ctx, w.lease, failures) }, len(failures) > 0) {
		return
	}
	for _, f := range failures {
		if f.Park {
			r.parked.Add(1)
			r.metrics.outcome(ctx, w.partition, "parked", 1)
			r.log.Warn("outbox relay: entry parked", "partition", w.partition, "id", f.ID, "err", f.Error)
		} else {
			r.retried.Add(1)
			r.metrics.outcome(ctx, w.partition, "retried", 1)
		}
	}
	w.release(ctx, out.skipped)
}

// mark runs a fenced outcome write, retrying transient store errors a few
// times while the lease lasts. On failure it gives the lease up (without
// releasing: its claims come back to the next holder once it expires) and
// reports false.
func (w *worker) mark(ctx context.Context, op string, write func(context.Context) error, needed bool) bool {
	if !needed {
		return true
	}
	r := w.r
	var err error
	for attempt, delay := 0, 20*time.Millisecond; attempt < 4; attempt, delay = attempt+1, delay*3 {
		if err = write(ctx); err == nil {
			return true
		}
		if errors.Is(err, ErrLeaseLost) {
			w.lost(err)
			return false
		}
		if ctx.Err() != nil || r.opts.Now().Add(delay).After(w.validUntil) || !sleep(ctx, delay) {
			break
		}
	}
	level := slog.LevelError
	if ctx.Err() != nil {
		level = slog.LevelDebug // stopping: the entries simply come back later
	}
	r.log.Log(ctx, level, "outbox relay: recording outcomes failed; abandoning the lease so its entries come back",
		"op", op, "partition", w.partition, "err", err)
	w.drop(nil, false)
	return false
}

// release returns untried entries; a failure only delays them until the
// lease changes hands.
func (w *worker) release(ctx context.Context, ids []string) {
	if len(ids) == 0 || !w.holding {
		return
	}
	if err := w.r.store.Release(ctx, w.lease, ids); err != nil {
		if errors.Is(err, ErrLeaseLost) {
			w.lost(err)
			return
		}
		w.r.log.Warn("outbox relay: releasing untried entries failed; they come back when the lease changes hands",
			"partition", w.partition, "err", err)
		w.drop(nil, false)
	}
}

// planRounds splits a batch into publish rounds. Ordered: round i holds the
// i-th entry of every key (keyless entries all go in round 0), in batch
// order; unordered: the batch as is. Rounds larger than maxInFlight are
// split.
func planRounds(batch []Entry, unordered bool, maxInFlight int) [][]Entry {
	var rounds [][]Entry
	if unordered {
		rounds = [][]Entry{batch}
	} else {
		seen := make(map[string]int, len(batch))
		for _, e := range batch {
			i := 0
			if e.Key != "" {
				i = seen[e.Key]
				seen[e.Key] = i + 1
			}
			if i == len(rounds) {
				rounds = append(rounds, nil)
			}
			rounds[i] = append(rounds[i], e)
		}
	}
	var out [][]Entry
	for _, r := range rounds {
		for len(r) > maxInFlight {
			out = append(out, r[:maxInFlight])
			r = r[maxInFlight:]
		}
		if len(r) > 0 {
			out = append(out, r)
		}
	}
	return out
}

func idsOf(entries []Entry) []string {
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	return ids
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence,
// so a truncated error is still valid text for every backend.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// breaker is the relay's circuit breaker over the sink, shared by all
// partition workers.
type breaker struct {
	threshold int
	cooldown  time.Duration

	mu        sync.Mutex
	failures  int
	open      bool
	openUntil time.Time
	probeAt   time.Time // when the half-open probe was let through; zero if none
}

// allow reports whether a round may be published now, and whether it is the
// half-open probe. A probe that never reports back (its batch was
// abandoned) is replaced after a cooldown.
func (b *breaker) allow(now time.Time) (allowed, probe bool) {
	if b.threshold < 0 {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return true, false
	}
	if now.Before(b.openUntil) || (!b.probeAt.IsZero() && now.Before(b.probeAt.Add(b.cooldown))) {
		return false, false
	}
	b.probeAt = now
	return true, true
}

// wait is how long until the breaker may let a round through (0 when
// closed or ready to probe).
func (b *breaker) wait(now time.Time) time.Duration {
	if b.threshold < 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open {
		return 0
	}
	until := b.openUntil
	if !b.probeAt.IsZero() {
		until = b.probeAt.Add(b.cooldown)
	}
	return max(until.Sub(now), 0)
}

// record counts a published round: success closes the breaker; a failed
// round opens it after threshold failures in a row, or at once when it was
// the probe.
func (b *breaker) record(success bool, now time.Time) {
	if b.threshold < 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	wasProbe := !b.probeAt.IsZero()
	b.probeAt = time.Time{}
	if success {
		b.failures, b.open = 0, false
		return
	}
	b.failures++
	if wasProbe || b.failures >= b.threshold {
		b.open, b.openUntil = true, now.Add(b.cooldown)
	}
}
