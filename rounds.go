package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// process publishes a batch in rounds and records its outcomes at the end
// of the batch: one MarkSent, one MarkFailed and one Release at most,
// however many rounds the batch took. Entries it does not attempt are
// released. A crash or lease loss before the end republishes at most this
// batch.
//
// A retryable failure holds back the later entries of its key until the
// next batch. A park does not: the later entries of its key go on in the
// following rounds, and so that a crash can never deliver them before a
// retry of the parked entry, the round's parks are recorded (one fenced
// MarkFailed) before any of those entries is published.
func (w *worker) process(ctx context.Context, batch []Entry) {
	r := w.r
	var out outcomes
	defer w.summarizeParks(&out, len(batch))
	batch, ok := w.parkTopicless(ctx, batch, &out)
	if !ok {
		return
	}
	rounds := planRounds(batch, r.opts.Unordered, r.opts.MaxInFlight)
	// lastRound is the last round holding each key (ordered mode only:
	// unordered publishing holds nothing back).
	lastRound := map[string]int{}
	if !r.opts.Unordered {
		for i, round := range rounds {
			for _, e := range round {
				if e.Key != "" {
					lastRound[e.Key] = i
				}
			}
		}
	}
	failedKeys := map[string]bool{}
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
		from := len(out.failures)
		w.publish(ctx, live, scale, failedKeys, &out)
		if !w.recordParksEarly(ctx, live, &out, from, func(key string) bool { return lastRound[key] > i }) {
			return // the lease is given up; nothing more is recorded
		}
	}
	if w.holding.Load() {
		w.record(ctx, &out)
	}
}

// parkTopicless parks the entries of batch that have no topic, which no
// sink can publish (append refuses them, so one comes only from stored data
// changed by hand or a backend that lets it through), and returns the
// rest. The parks are recorded at once, before any later entry of their
// keys is published; when that write fails the lease has been given up
// (see mark) and it reports false.
func (w *worker) parkTopicless(ctx context.Context, batch []Entry, out *outcomes) ([]Entry, bool) {
	var parks []Failure
	for _, e := range batch {
		if e.Topic == "" {
			parks = append(parks, Failure{ID: e.ID, Park: true,
				Error: "outbox relay: the entry has no topic, so no sink can publish it (its stored data was changed or not written by the outbox); inspect it (outbox show ID), cancel it, and append it again with a topic"})
		}
	}
	if len(parks) == 0 {
		return batch, true
	}
	r := w.r
	if !w.mark(ctx, "MarkFailed", func(ctx context.Context) error { return r.store.MarkFailed(ctx, w.lease, parks) }, true) {
		return nil, false
	}
	w.countFailures(ctx, parks, out)
	return slices.DeleteFunc(slices.Clone(batch), func(e Entry) bool { return e.Topic == "" }), true
}

// outcomes are a batch's results waiting to be recorded.
type outcomes struct {
	sent     []string
	failures []Failure // not recorded yet
	skipped  []string

	parked      int    // parks recorded in this batch
	firstReason string // the first of them's error
}

// recordParksEarly records the parks among out.failures[from:] (the
// failures of the round just published, whose entries are round) at once
// when a later entry of a parked entry's key is still to come in this
// batch (later reports whether one is). It removes what it recorded from
// out.failures. When the write fails the lease has been given up (see
// mark) and it reports false: the batch stops and records nothing more.
func (w *worker) recordParksEarly(ctx context.Context, round []Entry, out *outcomes, from int, later func(key string) bool) bool {
	keys := make(map[string]string, len(round))
	for _, e := range round {
		keys[e.ID] = e.Key
	}
	needed := false
	var parks []Failure
	for _, f := range out.failures[from:] {
		if f.Park {
			parks = append(parks, f)
			if k := keys[f.ID]; k != "" && later(k) {
				needed = true
			}
		}
	}
	if !needed {
		return true
	}
	r := w.r
	if !w.mark(ctx, "MarkFailed", func(ctx context.Context) error { return r.store.MarkFailed(ctx, w.lease, parks) }, true) {
		return false
	}
	rest := slices.DeleteFunc(out.failures[from:], func(f Failure) bool { return f.Park })
	out.failures = out.failures[:from+len(rest)]
	w.countFailures(ctx, parks, out)
	return true
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
	pctx, span := startPublishSpan(ctx, r.tracer, w.partition, round)
	start := time.Now()
	errs := w.publishRound(pctx, round)
	took := time.Since(start)
	if len(errs) != len(round) {
		err := fmt.Errorf("outbox: the sink returned %d results for %d messages (a bug in the sink)", len(errs), len(round))
		errs = make([]error, len(round))
		for i := range errs {
			errs[i] = err
		}
	}

	now := r.opts.Now()
	failed, retryable := 0, 0
	var firstErr error
	for i, e := range round {
		err := errs[i]
		if err == nil {
			out.sent = append(out.sent, e.ID)
			if !e.CreatedAt.IsZero() {
				r.metrics.committedToPublished(ctx, now.Sub(e.CreatedAt))
			}
			continue
		}
		if firstErr == nil {
			firstErr = err
		}
		failed++
		attempts := e.Attempts + 1
		park, delay := r.opts.Backoff.Decide(attempts, err, scale)
		if !park {
			retryable++
		}
		out.failures = append(out.failures, Failure{
			ID:    e.ID,
			Error: TruncateUTF8(err.Error(), 4096),
			Delay: delay,
			Park:  park,
		})
		if e.Key != "" && !r.opts.Unordered && !park {
			// A retry holds the key back; a park lets it go on (see
			// process).
			failedKeys[e.Key] = true
		}
		r.log.Debug("outbox relay: publish failed", "partition", w.partition, "id", e.ID,
			"attempts", attempts, "park", park, "retry_in", delay, "err", err)
	}
	endPublishSpan(span, failed, failed-retryable)
	r.metrics.published(ctx, took, failed > 0)
	if failed > 0 {
		// Entry-level detail is at Debug above; operators get a WARN at
		// most every 10 s with what failed since the last one.
		if log, n, total, sample := r.failures.add(now, failed, len(round), firstErr); log {
			r.log.Warn("outbox relay: publishing failed", "failed", n, "of_messages", total, "partition", w.partition, "err", sample)
		}
	}

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
	w.countFailures(ctx, failures, out)
	w.release(ctx, out.skipped)
}

// countFailures counts recorded failures in the stats and metrics, and the
// parks in out for the batch's summary; each park's detail is at Debug.
func (w *worker) countFailures(ctx context.Context, failures []Failure, out *outcomes) {
	r := w.r
	for _, f := range failures {
		if f.Park {
			r.parked.Add(1)
			r.metrics.outcome(ctx, w.partition, "parked", 1)
			r.log.Debug("outbox relay: entry parked", "partition", w.partition, "id", f.ID, "err", f.Error)
			if out.parked == 0 {
				out.firstReason = f.Error
			}
			out.parked++
		} else {
			r.retried.Add(1)
			r.metrics.outcome(ctx, w.partition, "retried", 1)
		}
	}
}

// summarizeParks logs the parks a batch recorded: one WARN at most every
// 10 s per relay, with the parks since the last one and the first reason.
func (w *worker) summarizeParks(out *outcomes, batch int) {
	if out.parked == 0 {
		return
	}
	r := w.r
	if log, n, total, sample := r.parks.add(r.opts.Now(), out.parked, batch, errors.New(out.firstReason)); log {
		r.log.Warn("outbox relay: entries parked; see the parked entries for each one's reason",
			"parked", n, "of_messages", total, "partition", w.partition, "first_reason", sample)
	}
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
	if len(ids) == 0 || !w.holding.Load() {
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
