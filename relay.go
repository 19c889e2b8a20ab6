package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Relay moves entries from a [Store] to a [Sink]: at least once, in
// per-key order, with retries, backoff, parking and scheduled delivery.
//
// A relay runs one worker per partition it may lease. A worker that holds
// its partition's lease fetches a bounded batch of due entries, publishes
// it and records each outcome, and repeats while work remains; when the
// partition is idle it waits for a notification naming its partition
// ([Relay.Notify], or the store's [Notifier]) or the poll interval.
//
// Publishing keeps per-key order: a batch is published in rounds, each
// holding at most one entry per key (entries without a key all go in the
// first round), so the sink never has two entries of a key in flight; a
// sink that keeps the order of a key's messages within a call
// ([KeyOrderer]) gets consecutive entries of a key of one topic in one
// round instead. When an entry fails with a retryable error (a park lets
// its key go on), the later entries of its key in the batch are not
// recorded as sent (those of later rounds are not
// attempted); they are released back to the store, where the failed entry
// holds them back until it is sent or parked.
//
// Leases: the worker tracks its lease's deadline on its own clock (the time
// it asked plus LeaseTTL) and renews once less than RenewMargin is left,
// also while a publish round is in flight, so a slow broker is not cut off
// while the lease is still held. It stops trusting the lease (cancels the
// round's publish and abandons the batch) the moment renewal reports it
// lost, or when it could not renew and the deadline, less the sink's
// [LandingBounder] bound, has passed. Stop releases every lease.
//
// Fleets: several relays may run against one outbox; each partition is
// relayed by one lease holder at a time. When the store implements
// [Membership] (all the project's backends do), the relays record
// heartbeats in it and share the partitions evenly: each holds
// ⌊P/N⌋ or ⌈P/N⌉ of P partitions among N live relays (within
// MaxPartitions where the caps allow, see [RelayOptions.MaxPartitions]),
// hands a surplus partition over after its batch in flight, and takes
// over the partitions of a relay whose heartbeat expired. Without
// Membership, or with an explicit [RelayOptions.Partitions], every relay
// takes every partition it can lease, as the first to ask wins.
//
// Failures are classified by [github.com/outboxrelay/outbox/backoff.ClassOf]:
// permanent failures and entries out of attempts are parked, others are
// re-scheduled after the backoff policy's delay, judged by the store's
// clock. A circuit breaker per topic stops publishing a topic while the
// sink fails every message of it, so an outage does not burn attempts and
// one dead topic does not stop the others.
//
// Retention and health: over a store that implements [ArchiveJanitor], or
// with RelayOptions.ParkedRetention, the relay that holds partition 0's
// lease runs retention rounds every RetentionInterval (see
// [RelayOptions.ArchiveRetention]); over a store that implements
// [HealthChecker], every relay reads the store's health every
// HealthInterval, logs each warning once and exports the figures.
//
// A Relay is safe for concurrent use.
type Relay struct {
	store Store
	opts  RelayOptions
	log   *slog.Logger
	// breakers are the circuit breakers, one per topic.
	breakers breakers
	counts   relayCounts
	coord    coordinator

	// workers holds the worker of each partition this relay serves, by
	// partition number (nil for partitions it does not serve).
	workers []*worker
	served  []*worker

	mu       sync.Mutex
	started  bool
	stopping context.CancelFunc // stops fetching
	hard     context.CancelFunc // cancels in-flight publishing and store calls
	done     chan struct{}      // closed when every worker has exited

	sampler *statsSampler // nil without Inspector or with StatsInterval < 0
	stores  *storeLog     // the store failures, summarised

	janitor    *janitor     // the retention rounds; nil when there are none
	archiveAge *archiveAge  // nil without ArchiveJanitor or with StatsInterval < 0
	health     *healthWatch // nil without HealthChecker or with HealthInterval < 0
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
	// PartitionsTarget is the number of partitions this relay aims to hold:
	// its share among the live relays with [Membership], else every
	// partition it serves (at most MaxPartitions).
	PartitionsTarget int64
	// Members is the number of live relays of the fleet this relay saw at
	// its last heartbeat (0 without [Membership]).
	Members int64
	// RetentionRounds counts the retention rounds this relay began (it
	// begins one only while it holds partition 0's lease; see
	// [RelayOptions.ArchiveRetention]).
	RetentionRounds int64
	// ArchivedRemoved counts the archived entries this relay's retention
	// rounds removed ([ArchiveJanitor.PurgeArchiveBatch]).
	ArchivedRemoved int64
	// ParkedRemoved counts the parked entries this relay's retention
	// rounds removed ([ParkedPurger.PurgeParked]).
	ParkedRemoved int64
}

// breakerVerb words the breaker's log line for the state it entered.
var breakerVerb = map[string]string{
	"open":      "opened: the sink failed every message of the topic in consecutive rounds; publishing to that topic pauses for the cooldown, other topics go on",
	"half_open": "half-open: letting one round of the topic through to probe the sink",
	"closed":    "closed: the sink works for the topic again",
}

// partitionProblems checks an explicit RelayOptions.Partitions against the
// store's partition count n: it reports the first partition that is out of
// range or repeated.
func partitionProblems(partitions []int, n int) []OptionProblem {
	seen := make(map[int]bool, len(partitions))
	for _, p := range partitions {
		if p < 0 || p >= n || seen[p] {
			return []OptionProblem{problem("{Partitions} has %d, which is out of range [0, %d) or repeated", p, n)}
		}
		seen[p] = true
	}
	return nil
}

// Stop bounds: after Stop's context ends, a sink that has not returned
// within sinkAbandonAfter of the cancellation is abandoned, and the final
// lease release and Leave get finalCallTimeout each (a release that began
// before, under releaseTimeout, is cut to finalCallTimeout from then).
const (
	sinkAbandonAfter = time.Second
	finalCallTimeout = 500 * time.Millisecond
	releaseTimeout   = 5 * time.Second
)

// NewRelay returns a relay from store to sink. It checks opts as
// [RelayOptions.Validate] does, and RelayOptions.Partitions against the
// store's partition count, and reports every bad setting at once as an
// [*OptionsError].
func NewRelay(store Store, sink Sink, opts RelayOptions) (*Relay, error) {
	if store == nil || sink == nil {
		return nil, errors.New("outbox: NewRelay needs a non-nil store and sink")
	}
	landing, declared := landingBound(sink)
	problems := opts.problems(landing)
	problems = append(problems, retentionProblems(store, opts)...)
	n := store.Partitions()
	if n >= 1 {
		problems = append(problems, partitionProblems(opts.Partitions, n)...)
	}
	if err := optionsError(problems); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, fmt.Errorf("outbox: the store reports %d partitions; it must have at least 1", n)
	}
	explicit := opts.Partitions != nil
	if pa, ok := store.(PollAdvisor); ok && opts.PollInterval == 0 && pa.PollInterval() > 0 {
		opts.PollInterval = pa.PollInterval()
	}
	o := opts.withDefaults()
	if o.Partitions == nil {
		o.Partitions = make([]int, n)
		for i := range o.Partitions {
			o.Partitions[i] = i
		}
	}
	r := &Relay{
		store:   store,
		opts:    o,
		log:     o.Logger.With("component", "outbox.relay", "owner", o.Owner),
		workers: make([]*worker, n),
	}
	if declared < 0 {
		r.log.Warn("outbox relay: the sink cannot bound how long after a cancelled publish a message can still be written, so a relay that lost its lease may have a record land after the next holder's record of the same key (consumers deduplicate by entry ID; for compacted topics use the Kafka sink's transactional mode)")
	}
	stores := newStoreLog(r.log, o.Now)
	r.stores = stores
	r.breakers.threshold = o.BreakerThreshold
	r.breakers.cooldown = o.BreakerCooldown
	cfg := r.workerConfig(sink, landing)
	cfg.stores = stores
	for _, p := range o.Partitions {
		w := &worker{cfg: cfg, partition: p, try: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
		r.workers[p] = w
		r.served = append(r.served, w)
	}
	r.coord.init(store, o, r.log, r.served, explicit)
	r.coord.stores = stores
	r.coord.pauses.stores = stores
	if !r.coord.balancing() && o.MaxPartitions > 0 && o.MaxPartitions < len(o.Partitions) {
		cfg.slots = make(chan struct{}, o.MaxPartitions)
	}
	if insp, ok := store.(Inspector); ok && o.StatsInterval > 0 {
		r.sampler = newStatsSampler(insp, o.StatsInterval, o.Now, stores)
	}
	r.initRetention(stores)
	metrics, err := newRelayMetrics(o.MeterProvider, r)
	if err != nil {
		return nil, err
	}
	cfg.metrics = metrics
	if r.janitor != nil {
		r.janitor.metrics = metrics
	}
	r.breakers.entered = func(topic, state string, failures int) {
		metrics.breakerEntered(topic, state)
		r.log.Warn("outbox relay: circuit breaker "+breakerVerb[state], "topic", topic, "state", state, "consecutive_failed_rounds", failures, "cooldown", o.BreakerCooldown)
	}
	return r, nil
}

// initRetention sets up the retention rounds, the archive's age sampler
// and the health checks, each when the store and the options call for it.
func (r *Relay) initRetention(stores *storeLog) {
	o := r.opts
	if j := newJanitor(r.store, o, r.workers[0]); j != nil {
		j.log, j.stores, j.counts = r.log, stores, &r.counts
		r.janitor = j
	}
	if aj, ok := r.store.(ArchiveJanitor); ok && o.StatsInterval > 0 {
		r.archiveAge = newArchiveAge(aj, o.StatsInterval, o.Now, stores)
	}
	r.health = newHealthWatch(r.store, o, r.log, stores)
}

// workerConfig makes the configuration the relay's workers share, but for
// slots and metrics, which NewRelay sets once the coordinator and the
// metrics are made. landing is the sink's landing bound.
func (r *Relay) workerConfig(sink Sink, landing time.Duration) *workerConfig {
	o := r.opts
	cfg := &workerConfig{
		owner:             o.Owner,
		batchSize:         o.BatchSize,
		maxInFlight:       o.MaxInFlight,
		pollInterval:      o.PollInterval,
		leaseTTL:          o.LeaseTTL,
		renewMargin:       o.RenewMargin,
		unordered:         o.Unordered,
		breakerThreshold:  o.BreakerThreshold,
		backoff:           o.Backoff,
		backpressureScale: o.BackpressureScale,
		now:               o.Now,
		landing:           landing,
		store:             r.store,
		sink:              sink,
		breakers:          &r.breakers,
		pauses:            &r.coord.pauses,
		counts:            &r.counts,
		failures:          &rateLog{every: 10 * time.Second},
		parks:             &rateLog{every: 10 * time.Second},
		log:               r.log,
		tracer:            o.TracerProvider.Tracer("github.com/outboxrelay/outbox"),
		coord:             &r.coord,
	}
	cfg.fetcher, _ = r.store.(BatchFetcher)
	cfg.prefetcher, _ = r.store.(Prefetcher)
	if ko, ok := sink.(KeyOrderer); ok && !o.Unordered {
		cfg.keyOrder = ko.KeepsKeyOrder()
	}
	return cfg
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
	for _, w := range r.served {
		wg.Go(func() { w.run(runCtx, hardCtx) })
	}
	wg.Go(func() { r.coord.run(runCtx, hardCtx) })
	if n, ok := r.store.(Notifier); ok {
		wg.Go(func() { r.listen(runCtx, n) })
	}
	if j := r.janitor; j != nil {
		j.announce()
		wg.Go(func() { j.run(runCtx, hardCtx) })
	}
	if h := r.health; h != nil {
		wg.Go(func() { h.run(runCtx) })
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
		r.coord.leave(hardCtx)
		hard()
		close(r.done)
	}()
	r.log.Info("outbox relay started", "partitions", len(r.served), "balancing", r.coord.balancing())
	return nil
}

// Stop stops fetching, waits for the batches in flight to finish (publish
// and mark), releases the leases and, with [Membership], deletes the
// relay's heartbeat record so the other relays take its partitions over at
// once. Stop is idempotent; Stop before Start returns nil.
//
// If ctx ends first, Stop cancels the in-flight publishing and store calls
// and still returns only after every worker has exited, then with ctx's
// error. The wait after ctx ends is bounded: a sink that has not returned
// 1 s after its context was cancelled is abandoned (its results are
// treated as failures and never recorded), and the final lease release and
// Leave get 500 ms each, so Stop returns within about 2 s of ctx's end
// for a store whose calls honour context cancellation. Leases not released
// expire on their own. Once Stop has returned, the relay makes no more
// calls to the store; only an abandoned Publish may still be running in
// the sink.
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
		<-done
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
// entries to cut the commit-to-publish latency. It never blocks. Only
// workers that hold their partition's lease look for entries.
func (r *Relay) Notify() {
	for _, w := range r.served {
		w.wakeUp()
	}
}

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{
		Published:        r.counts.published.Load(),
		Retried:          r.counts.retried.Load(),
		Parked:           r.counts.parked.Load(),
		Batches:          r.counts.batches.Load(),
		LeaseLosses:      r.counts.leaseLosses.Load(),
		PartitionsHeld:   r.counts.held.Load(),
		PartitionsTarget: r.coord.targetCount(),
		Members:          r.coord.membersSeen(),
		RetentionRounds:  r.counts.retentionRounds.Load(),
		ArchivedRemoved:  r.counts.archivedRemoved.Load(),
		ParkedRemoved:    r.counts.parkedRemoved.Load(),
	}
}

// Owner returns the relay's lease owner token.
func (r *Relay) Owner() string { return r.opts.Owner }

// listen routes the store's notifications to the workers of the partitions
// they name, resubscribing when the channel closes while the relay runs.
func (r *Relay) listen(ctx context.Context, n Notifier) {
	retry := r.opts.PollInterval
	for ctx.Err() == nil {
		began := r.opts.Now()
		ch, err := n.Notifications(ctx)
		if err != nil {
			r.stores.failed(ctx, opSubscribe, noPartition, began, err)
			if !sleep(ctx, retry) {
				return
			}
			continue
		}
		r.stores.ok(opSubscribe, noPartition)
		for p := range ch {
			switch {
			case p == AllPartitions:
				r.Notify()
			case p >= 0 && p < len(r.workers) && r.workers[p] != nil:
				r.workers[p].wakeUp()
			}
		}
		if !sleep(ctx, retry) {
			return
		}
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
