package outbox

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/outboxrelay/outbox/backoff"
	"go.opentelemetry.io/otel/trace"
)

// worker relays one partition. Its goroutine owns lease, validUntil, slot
// and streaks. It reads its relay only through cfg, and reports to the
// coordinator only through cfg.coord; the coordinator asks it to hold or
// hand over its partition, and reads whether it holds it, only through its
// methods (ask, handOver, holds, wanted, starving).
type worker struct {
	cfg       *workerConfig
	partition int

	// try is signalled (buffer of one) by the coordinator after it set want:
	// acquire the lease now.
	try chan struct{}
	// wake is signalled (buffer of one) when entries may have been appended
	// to the partition.
	wake chan struct{}
	// want is set by the coordinator when this relay should hold the
	// partition; cleared by the coordinator to hand a held partition over
	// (the worker releases it after its batch in flight) and by the worker
	// when it stops holding or failed to acquire.
	want atomic.Bool
	// holding reports whether the worker holds the lease.
	holding atomic.Bool
	// starved is set when the last try found no free MaxPartitions slot
	// (without Membership): such workers are tried again as soon as a slot
	// is given back.
	starved atomic.Bool

	lease      Lease
	validUntil time.Time // local deadline of the lease: ask time + TTL
	// trustUntil is validUntil less the sink's landing bound, in Unix
	// nanoseconds, for holdsTrusted; written with validUntil.
	trustUntil atomic.Int64
	slot       bool
	// streaks are this worker's runs of failed rounds, by topic, for the
	// topics' breakers.
	streaks map[string]*streak
}

// workerConfig is what the partition workers of a relay need from it: the
// settings NewRelay fixed and the relay's shared services (the store, the
// sink, the breakers, the counters, the logs and metrics). NewRelay makes
// one per relay, shared by its workers, and it never changes after; a
// worker reads nothing else of the relay.
type workerConfig struct {
	owner             string
	batchSize         int
	maxInFlight       int
	pollInterval      time.Duration
	leaseTTL          time.Duration
	renewMargin       time.Duration
	unordered         bool
	breakerThreshold  int
	backoff           backoff.Policy
	backpressureScale float64
	now               func() time.Time
	// landing is how long after Publish returns a message can still be
	// written by the broker (the sink's LandingBounder), 0 if it cannot.
	landing time.Duration
	// keyOrder is set when the sink keeps the order of a key's messages
	// in one Publish call (KeyOrderer): rounds then carry several entries
	// of a key.
	keyOrder bool

	store Store
	// fetcher is the store as a BatchFetcher, nil when it is not one.
	fetcher BatchFetcher
	// prefetcher is the store as a Prefetcher, nil when it is not one.
	prefetcher Prefetcher
	sink       Sink
	// slots is the MaxPartitions semaphore without Membership, nil
	// otherwise.
	slots    chan struct{}
	breakers *breakers // one per topic, shared by the workers
	// pauses are the store's pauses as the coordinator last read them.
	pauses   *pauses
	counts   *relayCounts
	failures *rateLog  // publish failures, logged at WARN at most every 10 s
	parks    *rateLog  // park summaries, logged at WARN at most every 10 s
	stores   *storeLog // store failures, summarised by kind
	log      *slog.Logger
	metrics  *relayMetrics
	tracer   trace.Tracer
	// coord is the worker's one line to the coordinator.
	coord holdingsReporter
}

// holdingsReporter is how a worker reports to the relay's coordinator
// (implemented by *coordinator). Neither call blocks.
type holdingsReporter interface {
	// poke says what the relay holds changed (a lease gained, given up or
	// lost, or a MaxPartitions slot freed), so the coordinator runs a pass
	// soon.
	poke()
	// attempted says an acquire the coordinator asked for failed;
	// heldElsewhere when another owner holds the partition.
	attempted(heldElsewhere bool)
}

// relayCounts are a relay's cumulative counters ([RelayStats]), added to
// by its workers.
type relayCounts struct {
	published, retried, parked, batches, leaseLosses, held atomic.Int64
	// retentionRounds, archivedRemoved and parkedRemoved are the
	// janitor's.
	retentionRounds, archivedRemoved, parkedRemoved atomic.Int64
}

// ask is the coordinator asking the worker to acquire its partition.
func (w *worker) ask() {
	w.want.Store(true)
	signal(w.try)
}

// handOver is the coordinator asking the worker to give its partition up
// after its batch in flight.
func (w *worker) handOver() {
	w.want.Store(false)
	w.wakeUp()
}

// holds reports whether the worker holds its partition's lease.
func (w *worker) holds() bool { return w.holding.Load() }

// wanted reports whether the coordinator wants the partition held (and the
// worker has not given up on it).
func (w *worker) wanted() bool { return w.want.Load() }

// starving reports whether the worker's last try found no free
// MaxPartitions slot.
func (w *worker) starving() bool { return w.starved.Load() }

// run is the worker's loop: hold the lease when the coordinator wants it
// held, fetch a batch, publish it, repeat while work remains; ctx ends it
// (fetching stops), hardCtx cancels the store calls and publishing in
// flight. It releases the lease when it returns.
func (w *worker) run(ctx, hardCtx context.Context) {
	cfg := w.cfg
	defer w.drop(hardCtx, true)
	// next is a batch claimed ahead (see prefetch), published in the next
	// pass once the lease is kept.
	var next *prefetched
	for ctx.Err() == nil {
		if next != nil && (!w.holding.Load() || !w.want.Load()) {
			next = nil // the lease ends: its claims come back by themselves
		}
		fetch, stop := w.ready(ctx, hardCtx)
		if stop {
			return
		}
		if !fetch {
			continue
		}
		batch, corrupt, err := w.take(hardCtx, next)
		next = nil
		switch {
		case errors.Is(err, ErrLeaseLost):
			w.lost(err)
			continue
		case err != nil:
			if hardCtx.Err() != nil {
				return
			}
			// Summarised by fetch.
			w.pause(ctx, hardCtx, cfg.pollInterval)
			continue
		case len(batch) == 0 && corrupt == 0:
			w.pause(ctx, hardCtx, cfg.pollInterval)
			continue
		}
		next = w.relayBatch(ctx, hardCtx, batch, corrupt)
	}
}

// ready takes one step toward a lease the worker may fetch under: it waits
// for the coordinator to ask for the partition, acquires it, gives it up
// when the coordinator handed it over, or renews it when it is due. It
// reports whether the worker may fetch now, and stop when ctx ended while
// it waited.
func (w *worker) ready(ctx, hardCtx context.Context) (fetch, stop bool) {
	if !w.holding.Load() {
		if !w.want.Load() {
			// Idle until the coordinator asks: a partition this relay
			// does not hold costs no store call, whatever is appended.
			select {
			case <-w.try:
			case <-ctx.Done():
				return false, true
			}
			return false, false
		}
		w.acquire(hardCtx)
		return false, false
	}
	if !w.want.Load() {
		// Handed over by the coordinator: the batch in flight is
		// finished (marked or released), so give the lease up.
		w.drop(hardCtx, true)
		return false, false
	}
	if !w.keep(hardCtx) {
		// Renewal failed but the lease may still be ours: pause
		// before asking again rather than hammering the store.
		if w.holding.Load() && !w.idle(ctx, max(w.cfg.pollInterval/4, 10*time.Millisecond)) {
			return false, true
		}
		return false, false
	}
	return true, false
}

// take returns the batch to publish next: next, when a batch was claimed
// ahead (while the batch before was published, which ended clean; see
// afterBatch), else a fresh fetch.
func (w *worker) take(ctx context.Context, next *prefetched) ([]Entry, int, error) {
	if next != nil {
		return next.batch, next.corrupt, nil
	}
	// A wake-up that arrives while the fetch runs stays in the channel,
	// so the wait after an empty fetch returns at once.
	select {
	case <-w.wake:
	default:
	}
	return w.fetch(ctx, w.lease, nil)
}

// relayBatch publishes a fetched batch (batch, with corrupt entries the
// store parked in the fetch) and then waits as its outcome calls for. It
// returns the batch claimed ahead to be published next, nil if none.
func (w *worker) relayBatch(ctx, hardCtx context.Context, batch []Entry, corrupt int) *prefetched {
	cfg := w.cfg
	full := len(batch)+corrupt >= cfg.batchSize
	if len(batch) > 0 {
		cfg.counts.batches.Add(1)
		pf := w.prefetch(hardCtx, batch, full)
		blocked, clean := w.process(hardCtx, batch)
		if next := w.afterBatch(hardCtx, pf, clean); next != nil {
			if len(next.batch) == 0 && next.corrupt == 0 {
				// The fetch ahead found nothing more due: wait as
				// after a short batch.
				w.pause(ctx, hardCtx, cfg.pollInterval)
				return nil
			}
			return next
		}
		if blocked > 0 {
			// Nothing was published: every entry's topic has its
			// breaker open (or is held back behind one). Wait for
			// the first breaker to let a probe through rather than
			// fetch the same entries again at once.
			w.pause(ctx, hardCtx, blocked)
			return nil
		}
	}
	if !full {
		// The store had nothing more that was due: wait for a
		// wake-up (one that arrived meanwhile returns at once) or
		// the poll, instead of an empty fetch per batch.
		w.pause(ctx, hardCtx, cfg.pollInterval)
	}
	return nil
}

// prefetched is a batch claimed by [Prefetcher.FetchNext] while the batch
// before it was published.
type prefetched struct {
	done    chan struct{} // closed when the fetch returned
	lease   Lease         // the lease it was claimed under
	woke    bool          // it took a wake-up from the channel
	batch   []Entry
	corrupt int
	err     error
}

// prefetch starts claiming the batch behind batch, the one about to be
// published, when the store is a [Prefetcher] and batch was full (full),
// so more is likely due. Not behind a short batch: the batch fetched
// ahead waits for the MarkSent of the one before it, so an entry
// committed while that one is published would wait for one more
// MarkSent than when fetched after it (Postgres's MarkSent, a commit,
// takes longer than its fetch). A wake-up that arrived before the fetch
// ahead starts is taken, as before any fetch.
func (w *worker) prefetch(ctx context.Context, batch []Entry, full bool) *prefetched {
	if w.cfg.prefetcher == nil || !full {
		return nil
	}
	woke := false
	select {
	case <-w.wake:
		woke = true
	default:
	}
	p := &prefetched{done: make(chan struct{}), lease: w.lease, woke: woke}
	go func() {
		defer close(p.done)
		p.batch, p.corrupt, p.err = w.fetch(ctx, p.lease, batch)
	}()
	return p
}

// afterBatch waits for the prefetch p (nil when none was started) and
// returns it (perhaps without entries) when its entries may be published next: the batch before it
// ended clean (every entry recorded as sent or parked) and the worker
// still holds the lease it was claimed under and is not handing the
// partition over. Otherwise it gives the entries back unattempted and
// returns nil, and puts back a wake-up the prefetch took: the worker goes
// on as if it had not prefetched.
func (w *worker) afterBatch(ctx context.Context, p *prefetched, clean bool) *prefetched {
	if p == nil {
		return nil
	}
	<-p.done
	sameLease := p.lease.Owner == w.lease.Owner && p.lease.Version == w.lease.Version
	if p.err == nil && clean && sameLease && w.holding.Load() && w.want.Load() {
		return p // perhaps empty: then nothing more was due
	}
	if p.err != nil && !errors.Is(p.err, ErrLeaseLost) && ctx.Err() == nil {
		w.cfg.log.Debug("outbox relay: fetching the next batch ahead failed; fetching it again", "partition", w.partition, "err", p.err)
	}
	if sameLease && len(p.batch) > 0 && ctx.Err() == nil {
		// (Stopping hard, the lease's release or expiry returns them.)
		w.release(ctx, idsOf(p.batch))
	}
	if p.woke {
		w.wakeUp()
	}
	return nil
}

// fetch claims the next batch under lease; with inFlight (the batch being
// published) through [Prefetcher.FetchNext]. From a [BatchFetcher] it also learns the
// entries the store parked because they do not decode: each is logged
// (the first maxCorruptLogs of a fetch one by one, the rest in one line)
// and counted like a park of the relay's own; it reports how many there
// were. A failure other than ErrLeaseLost goes to the store failures'
// summary.
func (w *worker) fetch(ctx context.Context, lease Lease, inFlight []Entry) ([]Entry, int, error) {
	cfg := w.cfg
	var b Batch
	var err error
	began := cfg.now()
	switch {
	case inFlight != nil:
		b, err = cfg.prefetcher.FetchNext(ctx, lease, cfg.batchSize, inFlight)
	case cfg.fetcher != nil:
		b, err = cfg.fetcher.FetchBatch(ctx, lease, cfg.batchSize)
	default:
		b.Entries, err = cfg.store.FindPendingBatch(ctx, lease, cfg.batchSize)
	}
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			cfg.stores.ok(opFetch, w.partition) // the store answered
		} else {
			cfg.stores.failed(ctx, opFetch, w.partition, began, err)
		}
		return nil, 0, err
	}
	cfg.stores.ok(opFetch, w.partition)
	for i, c := range b.Parked {
		cfg.counts.parked.Add(1)
		cfg.metrics.outcome(ctx, w.partition, "parked", 1)
		if i < maxCorruptLogs {
			cfg.log.Warn("outbox relay: the store parked an entry whose stored data does not decode; inspect it (outbox show ID), then fix it and requeue it, or cancel it",
				"partition", w.partition, "id", c.ID, "topic", c.Topic, "key", c.Key, "reason", c.Reason)
		}
	}
	if n := len(b.Parked); n > maxCorruptLogs {
		cfg.log.Warn("outbox relay: the store parked more entries whose stored data does not decode (outbox parked lists them)",
			"partition", w.partition, "more", n-maxCorruptLogs)
	}
	return b.Entries, len(b.Parked), nil
}

// maxCorruptLogs is how many parks of undecodable entries one fetch logs
// one by one.
const maxCorruptLogs = 20

// wakeUp tells the worker that entries may have been appended. It never
// blocks.
func (w *worker) wakeUp() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// idle waits d, a wake-up or the end of ctx; it reports whether ctx is live.
// pause waits up to d for a wake-up, renewing the held lease whenever it
// falls due meanwhile, so an idle partition is fetched on a wake-up or
// after d (PollInterval), not after every renewal. It returns early on a
// wake-up (a hand-over wakes the worker too), when ctx ends, or when the
// renewal did not keep the lease with its margin, for the loop to handle.
func (w *worker) pause(ctx, hardCtx context.Context, d time.Duration) {
	deadline := w.cfg.now().Add(d)
	for {
		left := deadline.Sub(w.cfg.now())
		if left <= 0 {
			return
		}
		renew := w.renewIn()
		if !w.holding.Load() || renew >= left {
			w.idle(ctx, left)
			return
		}
		t := time.NewTimer(renew)
		select {
		case <-t.C:
		case <-w.wake:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		}
		if !w.want.Load() || !w.keep(hardCtx) {
			return
		}
	}
}

func (w *worker) idle(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.wake:
	case <-ctx.Done():
		return false
	}
	return true
}
