package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox/backoff"
)

// process publishes a batch in rounds and records its outcomes at the end
// of the batch: one MarkSent, one MarkFailed and one Release at most,
// however many rounds the batch took, plus one fenced MarkFailed for the
// entries without a topic and one per round whose parks must be recorded
// before the key's later entries are published. Entries it does not attempt are
// released. A crash or lease loss before the end republishes at most this
// batch.
//
// A retryable failure holds back the later entries of its key until the
// next batch (with a KeyOrderer sink, those in its own round too, whatever
// the sink reported for them). A park does not: the later entries of its
// key go on in the following rounds, and so that a crash can never deliver
// them before a retry of the parked entry, the round's parks are recorded
// (one fenced MarkFailed) before any of those entries is published. (With
// a KeyOrderer sink, the later entries in the parked entry's own round
// were published with it; see docs/design.md, "Hot keys".) Before each
// round, the entries of a topic or partition the relay knows to be paused
// are given back unattempted and hold their keys back (see holdPaused), as
// are those of a topic whose breaker is open (see splitByBreaker).
//
// It returns how long to wait before the next fetch when nothing of the
// batch was published because every entry's topic has its breaker open
// and no topic's breaker is closed (0 otherwise), and whether the batch
// ended clean: every entry recorded as sent or parked, under the lease the
// worker still holds (a batch prefetched behind it may then be published;
// see [Prefetcher]).
func (w *worker) process(ctx context.Context, batch []Entry) (blocked time.Duration, clean bool) {
	cfg := w.cfg
	var out outcomes
	defer w.summarizeParks(&out, len(batch))
	batch, ok := w.parkTopicless(ctx, batch, &out)
	if !ok {
		return 0, false
	}
	rounds := planRounds(batch, cfg.unordered, cfg.keyOrder, cfg.maxInFlight)
	out.sent = make([]string, 0, len(batch))
	last := lastRounds{rounds: rounds, unordered: cfg.unordered}
	// failedKeys are the keys held back for the rest of the batch: one of
	// their entries failed with a retryable error, or was deferred or given
	// back because its topic's breaker is open or its topic or partition
	// is paused.
	failedKeys := map[string]bool{}
	attempted := false
	for i, round := range rounds {
		live := w.holdPaused(holdBack(round, failedKeys, &out), failedKeys, &out)
		if len(live) == 0 {
			continue
		}
		if ctx.Err() != nil || !w.keep(ctx) {
			out.skipRounds(live, rounds[i+1:])
			break
		}
		gates, allAllowed := w.gate(live)
		open := live // every topic's breaker lets the round through
		from := len(out.failures)
		if !allAllowed {
			var deferred bool
			var wait time.Duration
			open, deferred, wait = w.splitByBreaker(live, gates, failedKeys, &out)
			attempted = attempted || deferred
			if wait > 0 && (blocked == 0 || wait < blocked) {
				blocked = wait
			}
		}
		if len(open) > 0 {
			attempted = true
			w.publish(ctx, open, gates, failedKeys, &out)
		}
		if !w.recordParksEarly(ctx, live, &out, from, func(key string) bool { return last.later(key, i) }) {
			return 0, false // the lease is given up; nothing more is recorded
		}
	}
	if w.holding.Load() {
		w.record(ctx, &out)
	}
	clean = out.recorded && len(out.skipped) == 0 && !out.retried
	if attempted {
		// Something was published: fetch again at once, as usual.
		return 0, clean
	}
	return blocked, clean // a blocked batch skipped entries, so it is not clean
}

// lastRounds knows the last round of a batch holding each key (ordered
// mode only: unordered publishing holds nothing back), worked out when a
// park first needs it.
type lastRounds struct {
	rounds    [][]Entry
	unordered bool
	last      map[string]int
}

// later reports whether a round after round i holds an entry of key.
func (l *lastRounds) later(key string, i int) bool {
	if l.last == nil {
		l.last = map[string]int{}
		if !l.unordered {
			for j, round := range l.rounds {
				for _, e := range round {
					if e.Key != "" {
						l.last[e.Key] = j
					}
				}
			}
		}
	}
	return l.last[key] > i
}

// holdBack returns the entries of round whose key did not fail earlier in
// the batch (failedKeys), and gives the others back (out.skipped).
func holdBack(round []Entry, failedKeys map[string]bool, out *outcomes) []Entry {
	if len(failedKeys) == 0 {
		return round
	}
	live := round[:0:0]
	for _, e := range round {
		if e.Key != "" && failedKeys[e.Key] {
			out.skipped = append(out.skipped, e.ID)
			continue
		}
		live = append(live, e)
	}
	return live
}

// skipRounds gives back the entries of the round that was to be published
// (live) and of every round after it (rest).
func (out *outcomes) skipRounds(live []Entry, rest [][]Entry) {
	out.skipped = append(out.skipped, idsOf(live)...)
	for _, r := range rest {
		out.skipped = append(out.skipped, idsOf(r)...)
	}
}

// splitByBreaker returns the entries of live whose topic's breaker lets
// them through (gates). Entries of a topic whose breaker is open are not
// published, and hold their key back for the rest of the batch
// (failedKeys). When some other topic's breaker is closed, the sink works
// and the topic is the problem: the first entry of each key (and every
// entry without a key) is deferred (see deferEntry), so it does not stay
// ahead of the partition's other entries and holds its key back in the
// store, and deferred reports that; the later entries of its key in the
// round were not handed to the sink either, so they are given back
// unattempted (out.skipped), as behind a retryable failure. When no
// breaker is closed the sink is down: they are given back unchanged
// (out.skipped), and wait is how long until the first of their breakers
// may let a probe through (at least 1ms; 0 when none was given back).
// Neither way counts an attempt.
func (w *worker) splitByBreaker(live []Entry, gates map[string]gate, failedKeys map[string]bool, out *outcomes) (open []Entry, deferred bool, wait time.Duration) {
	open = live[:0:0]
	sinkWorks := false
	for j, e := range live {
		g := gates[e.Topic]
		if g.allowed {
			open = append(open, e)
			continue
		}
		if j == 0 || !sinkWorks {
			sinkWorks = w.cfg.breakers.anyClosed()
		}
		ordered := e.Key != "" && !w.cfg.unordered
		behind := ordered && failedKeys[e.Key] // an earlier entry of its key in this round was held back
		if ordered {
			failedKeys[e.Key] = true
		}
		if sinkWorks && !behind {
			w.deferEntry(e, g, out)
			deferred = true
			continue
		}
		out.skipped = append(out.skipped, e.ID)
		if !sinkWorks && (wait == 0 || g.wait < wait) {
			wait = max(g.wait, time.Millisecond)
		}
	}
	return open, deferred, wait
}

// deferEntry defers e, whose topic's breaker is open, without publishing
// it ([Failure.Deferred]): it is not an attempt, so e keeps its Attempts,
// LastError and history, and is never parked for it. It is re-scheduled
// after the delay a transient failure of its next attempt would get
// (scaled by BackpressureScale), at least until the breaker may let a
// probe through.
func (w *worker) deferEntry(e Entry, g gate, out *outcomes) {
	cfg := w.cfg
	delay := max(cfg.backoff.Delay(e.Attempts+1, backoff.ClassTransient, cfg.backpressureScale), g.wait)
	// The store keeps no Error of a deferral; the text is for the
	// relay's debug log.
	err := fmt.Sprintf("outbox relay: not published: the circuit breaker of topic %q is open (the sink failed every message of it in %d rounds in a row)", e.Topic, cfg.breakerThreshold)
	out.failures = append(out.failures, Failure{ID: e.ID, Error: err, Delay: delay, Deferred: true})
}

// gate is what a topic's breaker allows a round.
type gate struct {
	allowed bool
	scale   float64       // backoff scale of the topic's retries
	wait    time.Duration // until the breaker may let a round through (not allowed)
}

// gate asks the breaker of every topic of round whether the round may
// publish its entries; all reports whether every topic's may.
func (w *worker) gate(round []Entry) (gates map[string]gate, all bool) {
	cfg := w.cfg
	now := cfg.now()
	gates = map[string]gate{}
	all = true
	last := ""
	for i := range round {
		e := &round[i]
		if i > 0 && e.Topic == last {
			continue
		}
		last = e.Topic
		if _, ok := gates[e.Topic]; ok {
			continue
		}
		b := cfg.breakers.of(e.Topic)
		allowed, probing := b.allow(now)
		g := gate{allowed: allowed, scale: 1}
		switch {
		case !allowed:
			g.wait = b.wait(now)
		case probing:
			g.scale = cfg.backpressureScale
		}
		gates[e.Topic] = g
		all = all && allowed
	}
	return gates, all
}

// publish sends one round and adds its outcomes to out. failedKeys holds
// the keys held back: a retryable failure adds its key, and every later
// entry of that key in the round is given back (out.skipped) whatever the
// sink reported for it (see KeyOrderer).
func (w *worker) publish(ctx context.Context, round []Entry, gates map[string]gate, failedKeys map[string]bool, out *outcomes) {
	cfg := w.cfg
	pctx, span := startPublishSpan(ctx, cfg.tracer, w.partition, round)
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

	now := cfg.now()
	failed, retryable := 0, 0
	// byTopic counts, per topic, the round's entries and those that failed
	// with a retryable error, for the topic's breaker.
	type tally struct{ n, retryable int }
	byTopic := map[string]*tally{}
	var firstErr error
	for i, e := range round {
		err := errs[i]
		t := byTopic[e.Topic]
		if t == nil {
			t = &tally{}
			byTopic[e.Topic] = t
		}
		t.n++
		if e.Key != "" && !cfg.unordered && failedKeys[e.Key] {
			// An earlier entry of its key failed in this round: it is
			// not sent, whatever the sink says, and goes back to the
			// store unchanged, behind that entry's retry.
			out.skipped = append(out.skipped, e.ID)
			if err != nil && backoff.ClassOf(err) != backoff.ClassPermanent {
				t.retryable++
			}
			continue
		}
		if err == nil {
			out.sent = append(out.sent, e.ID)
			if !e.CreatedAt.IsZero() {
				cfg.metrics.committedToPublished(ctx, now.Sub(e.CreatedAt))
			}
			continue
		}
		if firstErr == nil {
			firstErr = err
		}
		failed++
		attempts := e.Attempts + 1
		park, delay := cfg.backoff.Decide(attempts, err, gates[e.Topic].scale)
		if !park {
			retryable++
			t.retryable++
		}
		out.failures = append(out.failures, Failure{
			ID:    e.ID,
			Error: TruncateUTF8(err.Error(), 4096),
			Delay: delay,
			Park:  park,
		})
		if e.Key != "" && !cfg.unordered && !park {
			// A retry holds the key back; a park lets it go on (see
			// process).
			failedKeys[e.Key] = true
		}
		cfg.log.Debug("outbox relay: publish failed", "partition", w.partition, "id", e.ID, "topic", e.Topic,
			"attempts", attempts, "park", park, "retry_in", delay, "err", err)
	}
	endPublishSpan(span, failed, failed-retryable)
	cfg.metrics.published(ctx, took, failed > 0)
	if failed > 0 {
		// Entry-level detail is at Debug above; operators get a WARN at
		// most every 10 s with what failed since the last one.
		if log, n, total, sample := cfg.failures.add(now, failed, len(round), firstErr); log {
			cfg.log.Warn("outbox relay: publishing failed", "failed", n, "of_messages", total, "partition", w.partition, "err", sample)
		}
	}

	// A topic all of whose messages in the round failed with a retryable
	// error is down as far as the sink can tell; anything else (even a
	// permanent refusal) says it works.
	for topic, t := range byTopic {
		st := w.streaks[topic]
		if st == nil {
			if w.streaks == nil {
				w.streaks = map[string]*streak{}
			}
			st = &streak{}
			w.streaks[topic] = st
		}
		cfg.breakers.of(topic).record(t.retryable < t.n, now, st)
	}
}

// publishRound hands one round to the sink and waits for its results
// while keeping the lease: it renews the lease when it is due, also in the
// middle of a slow publish, and cancels the publish the moment the lease is
// reported lost, or when it could not be renewed and only the sink's
// landing bound is left of it. When ctx ends (a hard stop) the publish is
// cancelled too. A sink that has not returned sinkAbandonAfter after its
// cancellation is abandoned: its messages count as failed, with an error
// saying their fate is unknown.
func (w *worker) publishRound(ctx context.Context, round []Entry) []error {
	cfg := w.cfg
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	result := make(chan []error, 1)
	go func() { result <- cfg.sink.Publish(pctx, round) }()

	renew := time.NewTimer(w.renewIn())
	defer renew.Stop()
	trust := time.NewTimer(max(w.trustLeft(), 0))
	defer trust.Stop()
	var abandon <-chan time.Time
	var why error
	cut := func(reason error) {
		cancel()
		if abandon == nil {
			why = reason
			abandon = time.After(sinkAbandonAfter)
		}
	}
	hard := ctx.Done()
	for {
		select {
		case errs := <-result:
			return errs
		case <-renew.C:
			if !w.holding.Load() {
				continue
			}
			switch err := w.renew(ctx); {
			case err == nil:
				renew.Reset(w.renewIn())
				trust.Reset(max(w.trustLeft(), 0))
			case errors.Is(err, ErrLeaseLost):
				w.lost(err)
				cut(err)
			default:
				if ctx.Err() == nil {
					cfg.log.Warn("outbox relay: renewing a lease during a publish failed", "partition", w.partition, "err", err)
				}
				renew.Reset(max(min(cfg.pollInterval/4, w.trustLeft()/2), 10*time.Millisecond))
			}
		case <-trust.C:
			if w.holding.Load() && w.trustLeft() > 0 {
				trust.Reset(w.trustLeft()) // renewed meanwhile
				continue
			}
			cut(fmt.Errorf("the lease on partition %d could not be renewed in time: %w", w.partition, ErrLeaseLost))
		case <-hard:
			hard = nil
			cut(ctx.Err())
		case <-abandon:
			err := fmt.Errorf("outbox: the sink did not return %v after its publish was cancelled (%v); the fate of the message is unknown (it may still be written, as a duplicate)", sinkAbandonAfter, why)
			cfg.log.Error("outbox relay: abandoning a publish the sink did not finish after cancellation", "partition", w.partition, "messages", len(round), "reason", why)
			errs := make([]error, len(round))
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
	}
}

// planRounds splits a batch into publish rounds. Ordered: round i holds the
// i-th entry of every key (keyless entries all go in round 0), in batch
// order; with keyOrder (a sink that keeps the order of a key's messages in
// one call, see KeyOrderer) an entry goes in the round of its key's
// previous entry when both have the same topic, and in the next round
// otherwise; unordered: the batch as is. Rounds larger than maxInFlight
// are split.
//
// A batch that is one round is returned as it is (sub-slices of batch);
// otherwise the rounds share one new backing array. Each round's capacity
// is its length, so appending to one never writes into another.
func planRounds(batch []Entry, unordered, keyOrder bool, maxInFlight int) [][]Entry {
	var rounds [][]Entry
	switch {
	case unordered || len(batch) == 0:
		rounds = [][]Entry{batch}
	default:
		// at[i] is the round of batch[i]; sizes the length of each round.
		at := make([]int32, len(batch))
		var sizes []int
		if keyOrder {
			type last struct {
				round int32
				topic string
			}
			seen := make(map[string]last, len(batch))
			for j := range batch {
				e := &batch[j]
				var i int32
				if e.Key != "" {
					if l, ok := seen[e.Key]; ok {
						i = l.round
						if l.topic != e.Topic {
							i++
						}
					}
					seen[e.Key] = last{i, e.Topic}
				}
				at[j] = i
				for int(i) >= len(sizes) {
					sizes = append(sizes, 0)
				}
				sizes[i]++
			}
		} else {
			seen := make(map[string]int32, len(batch))
			for j := range batch {
				e := &batch[j]
				var i int32
				if e.Key != "" {
					i = seen[e.Key]
					seen[e.Key] = i + 1
				}
				at[j] = i
				if int(i) == len(sizes) {
					sizes = append(sizes, 0)
				}
				sizes[i]++
			}
		}
		if len(sizes) == 1 {
			rounds = [][]Entry{batch}
			break
		}
		buf := make([]Entry, len(batch))
		rounds = make([][]Entry, len(sizes))
		off := 0
		for i, n := range sizes {
			rounds[i] = buf[off : off : off+n]
			off += n
		}
		for j, i := range at {
			rounds[i] = append(rounds[i], batch[j])
		}
	}
	var out [][]Entry
	for _, r := range rounds {
		for len(r) > maxInFlight {
			out = append(out, r[:maxInFlight:maxInFlight])
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
