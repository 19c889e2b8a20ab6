package outbox

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"
)

// Recording a batch's outcomes: what process collected (sent, failed,
// parked, given back) written to the store under the lease, with the
// relay's counts, metrics and logs of them.

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
	cfg := w.cfg
	if !w.mark(ctx, "MarkFailed", func(ctx context.Context) error { return cfg.store.MarkFailed(ctx, w.lease, parks) }, true) {
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
	// recorded is set once every outcome of the batch is written, and
	// retried when one of them was a retryable failure.
	recorded, retried bool

	parked      int    // parks recorded in this batch
	firstReason string // the first of them's error
}

// recordParksEarly records the parks among out.failures[from:] (the
// failures of the round just published, whose entries are round) at once
// when a later entry of a parked entry's key is still to come in this
// batch (later reports whether one is). It removes what it recorded from
// out.failures. When the lease is gone (lost during the publish, or given
// up because the write failed; see mark) it reports false: the batch stops
// and records nothing more.
func (w *worker) recordParksEarly(ctx context.Context, round []Entry, out *outcomes, from int, later func(key string) bool) bool {
	if !w.holding.Load() {
		return false // the publish lost the lease (and counted that)
	}
	if !slices.ContainsFunc(out.failures[from:], func(f Failure) bool { return f.Park }) {
		return true
	}
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
	cfg := w.cfg
	if !w.mark(ctx, "MarkFailed", func(ctx context.Context) error { return cfg.store.MarkFailed(ctx, w.lease, parks) }, true) {
		return false
	}
	rest := slices.DeleteFunc(out.failures[from:], func(f Failure) bool { return f.Park })
	out.failures = out.failures[:from+len(rest)]
	w.countFailures(ctx, parks, out)
	return true
}

// record writes a batch's outcomes: sent, then failed, then the untried
// entries released. A write that fails gives the lease up (see mark), and
// what was not recorded comes back to the next holder.
func (w *worker) record(ctx context.Context, out *outcomes) {
	cfg := w.cfg
	sent, failures := out.sent, out.failures
	if !w.mark(ctx, "MarkSent", func(ctx context.Context) error { return cfg.store.MarkSent(ctx, w.lease, sent) }, len(sent) > 0) {
		return
	}
	cfg.counts.published.Add(int64(len(sent)))
	cfg.metrics.outcome(ctx, w.partition, "sent", len(sent))
	if !w.mark(ctx, "MarkFailed", func(ctx context.Context) error { return cfg.store.MarkFailed(ctx, w.lease, failures) }, len(failures) > 0) {
		return
	}
	w.countFailures(ctx, failures, out)
	w.release(ctx, out.skipped)
	out.recorded = w.holding.Load()
}

// countFailures counts recorded failures in the stats and metrics, and the
// parks in out for the batch's summary; each park's detail is at Debug.
func (w *worker) countFailures(ctx context.Context, failures []Failure, out *outcomes) {
	cfg := w.cfg
	for _, f := range failures {
		if f.Deferred {
			// Not an attempt (an open breaker): not a retry either, but
			// the entry is not done, so the batch is not clean.
			out.retried = true
			cfg.metrics.outcome(ctx, w.partition, "deferred", 1)
			cfg.log.Debug("outbox relay: entry deferred", "partition", w.partition, "id", f.ID, "retry_in", f.Delay, "why", f.Error)
			continue
		}
		if f.Park {
			cfg.counts.parked.Add(1)
			cfg.metrics.outcome(ctx, w.partition, "parked", 1)
			cfg.log.Debug("outbox relay: entry parked", "partition", w.partition, "id", f.ID, "err", f.Error)
			if out.parked == 0 {
				out.firstReason = f.Error
			}
			out.parked++
		} else {
			out.retried = true
			cfg.counts.retried.Add(1)
			cfg.metrics.outcome(ctx, w.partition, "retried", 1)
		}
	}
}

// summarizeParks logs the parks a batch recorded: one WARN at most every
// 10 s per relay, with the parks since the last one and the first reason.
func (w *worker) summarizeParks(out *outcomes, batch int) {
	if out.parked == 0 {
		return
	}
	cfg := w.cfg
	if log, n, total, sample := cfg.parks.add(cfg.now(), out.parked, batch, errors.New(out.firstReason)); log {
		cfg.log.Warn("outbox relay: entries parked; see the parked entries for each one's reason",
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
	cfg := w.cfg
	var err error
	for attempt, delay := 0, 20*time.Millisecond; attempt < 4; attempt, delay = attempt+1, delay*3 {
		if err = write(ctx); err == nil {
			return true
		}
		if errors.Is(err, ErrLeaseLost) {
			w.lost(err)
			return false
		}
		if ctx.Err() != nil || cfg.now().Add(delay).After(w.validUntil) || !sleep(ctx, delay) {
			break
		}
	}
	level := slog.LevelError
	if ctx.Err() != nil {
		level = slog.LevelDebug // stopping: the entries simply come back later
	}
	cfg.log.Log(ctx, level, "outbox relay: recording outcomes failed; abandoning the lease so its entries come back",
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
	if err := w.cfg.store.Release(ctx, w.lease, ids); err != nil {
		if errors.Is(err, ErrLeaseLost) {
			w.lost(err)
			return
		}
		w.cfg.log.Warn("outbox relay: releasing untried entries failed; they come back when the lease changes hands",
			"partition", w.partition, "err", err)
		w.drop(nil, false)
	}
}
