package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

// The poison workload (W6): entries that fail for good, on few keys.
const (
	poisonN          = 20000 // entries in a full run
	poisonQuickN     = 1000  // with -quick
	poisonKeys       = 7
	poisonPartitions = 16
	// The rates before a park stopped holding its key back to the next
	// batch (one park per key and batch), measured in issue 18.
	poisonOldPG    = 206.0
	poisonOldRedis = 250.0
)

// poisonMessages returns n messages over poisonKeys keys, round robin.
func poisonMessages(n int) *messages {
	m := &messages{keys: make([]string, n), keySeq: make([]int, n), payload: make([][]byte, n)}
	for i := range n {
		m.keys[i] = fmt.Sprint("agg-", i%poisonKeys) // keyLane wants "agg-<n>"
		m.keySeq[i] = i / poisonKeys
		m.payload[i] = payload(i, m.keySeq[i])
	}
	return m
}

// poisonSink attempts every message (checking per-key order) and refuses
// it for good.
type poisonSink struct{ tr *tracker }

var errPoison = backoff.Permanent(errors.New("bench: poison entry refused for good"))

func (p poisonSink) Publish(_ context.Context, msgs []outbox.Entry) []error {
	errs := make([]error, len(msgs))
	for i := range msgs {
		p.tr.markOrdered(msgs[i].Key, msgs[i].Payload)
		errs[i] = errPoison
	}
	return errs
}

// poison: every entry fails permanently; one relay with its defaults parks
// them all. The rate runs from Start until the relay counted every park.
func (s *Suite) poison(ctx context.Context, t target) error {
	n := poisonN
	if s.cfg.Quick {
		n = poisonQuickN
	}
	msgs := poisonMessages(n)
	sr := s.sr(t.key + ".poison")
	for run := range s.thisRun() {
		in, err := t.open(ctx, poisonPartitions)
		if err != nil {
			return err
		}
		if _, err := in.fill(ctx, msgs, 100); err != nil {
			in.close()
			return err
		}
		tr := newTracker(n)
		el, parked, err := s.parkAll(ctx, in.store, poisonSink{tr}, n)
		c := tr.counts_()
		if err == nil {
			err = c.check(false) // every entry attempted once, in key order
		}
		if err == nil && parked != int64(n) {
			err = fmt.Errorf("the relay counted %d parks, want %d", parked, n)
		}
		if err == nil {
			err = in.expectPending(ctx, 0)
		}
		if err == nil {
			err = expectParked(ctx, in.store, n)
		}
		in.close()
		if err != nil {
			s.fail("outbox/%s W6 poison run %d: %v", t.name, run+1, err)
			continue
		}
		sr.add(rate(n, el), &c)
	}
	old := poisonOldPG
	if t.name == "redis" {
		old = poisonOldRedis
	}
	w := fmt.Sprintf("%s, %s permanently failing entries over %d keys", t.title, human(n), poisonKeys)
	s.record("ours."+t.key+".poison", w, "outbox/"+t.name+" relay", "parked/s", true, sr,
		fmt.Sprintf("1 relay, defaults, %d partitions; before: %.0f parked/s (one park per key and batch, issue 18)", poisonPartitions, old))
	return nil
}

// parkAll runs one relay over store until it counted want parks, and
// returns the time from Start and the parks counted.
func (s *Suite) parkAll(ctx context.Context, store outbox.Store, sink outbox.Sink, want int) (time.Duration, int64, error) {
	r, err := outbox.NewRelay(store, sink, relayOptions(nil))
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := r.Start(ctx); err != nil {
		return 0, 0, err
	}
	deadline := start.Add(drainTimeout(want))
	var werr error
	for r.Stats().Parked < int64(want) {
		if time.Now().After(deadline) {
			werr = fmt.Errorf("timed out: %d of %d parked after %s", r.Stats().Parked, want, time.Since(start).Round(time.Second))
			break
		}
		if !sleepCtx(ctx, 2*time.Millisecond) {
			werr = ctx.Err()
			break
		}
	}
	el := time.Since(start)
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Stop(stopCtx); err != nil {
		s.logf("relay stop: %v", err)
	}
	return el, r.Stats().Parked, werr
}

func expectParked(ctx context.Context, store outbox.Store, want int) error {
	insp, ok := store.(outbox.Inspector)
	if !ok {
		return errors.New("the backend is not an outbox.Inspector")
	}
	st, err := insp.Stats(ctx)
	if err != nil {
		return err
	}
	if st.Parked != int64(want) {
		return fmt.Errorf("count wrong: %d parked in the store, want %d", st.Parked, want)
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
