package sinksuite

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

func errorCases() []testCase {
	return []testCase{
		{"Errors", "Classified", errorsClassified},
		{"Cancel", "CancelledBeforeCall", cancelBeforeCall},
		{"Cancel", "CancelledWhileStalled", cancelWhileStalled},
		{"LandingBound", "NothingLandsLater", landingNothingLater},
	}
}

// errorsClassified runs once per fault of the harness: the entries the
// fault hits fail with its class (a permanent error naming what to
// configure), other entries of the call are not failed permanently by
// it, and after the heal the same entries publish.
func errorsClassified(t *testing.T, s *env) {
	faults := s.h.Faults()
	if len(faults) == 0 {
		t.Skip("the harness offers no fault (Harness.Faults)")
	}
	for i, f := range faults {
		t.Run(f.Name, func(t *testing.T) {
			t.Parallel()
			sub := newEnv(t, s.newHarness)
			fs := sub.h.Faults()
			if len(fs) != len(faults) || fs[i].Name != f.Name {
				t.Fatalf("Harness.Faults must return the same faults in the same order from every harness; got %d faults, want %d", len(fs), len(faults))
			}
			if fs[i].Apply == nil {
				t.Fatalf("fault %q has no Apply", f.Name)
			}
			if fs[i].Stalls && fs[i].Permanent {
				t.Fatalf("fault %q: a Stalls fault cannot be Permanent", f.Name)
			}
			if fs[i].PerEntry {
				classifyPerEntry(t, sub, fs[i])
			} else {
				classifyDestination(t, sub, fs[i])
			}
		})
	}
}

// classifyPerEntry breaks the middle one of three entries of distinct
// keys.
func classifyPerEntry(t *testing.T, s *env, f Fault) {
	entries := s.distinct(3)
	orig := entries[1].Clone()
	heal := s.apply(t, f, &entries[1])
	ctx, cancel := context.WithTimeout(s.ctx, faultPublishTimeout)
	errs := s.publish(t, ctx, entries)
	cancel()
	expectClass(t, f, "the broken entry "+entries[1].ID, errs[1])
	for _, i := range []int{0, 2} {
		if errs[i] != nil && backoff.ClassOf(errs[i]) == backoff.ClassPermanent {
			t.Errorf("entry %s of another key failed permanently because of fault %q on %s: %v", entries[i].ID, f.Name, entries[1].ID, errs[i])
		}
	}
	s.expectReadable(t, entries, errs)
	heal()
	again := []outbox.Entry{orig}
	s.publishOK(t, again)
	s.expectReadable(t, again, nil)
}

// classifyDestination publishes three entries while the fault is on:
// every one must fail with the fault's class.
func classifyDestination(t *testing.T, s *env, f Fault) {
	entries := s.distinct(3)
	heal := s.apply(t, f, nil)
	timeout := faultPublishTimeout
	if f.Stalls {
		timeout = stallPublishTimeout
	}
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	errs := s.publishWithin(t, ctx, entries, waitLimit)
	cancel()
	for i, err := range errs {
		expectClass(t, f, "entry "+entries[i].ID, err)
	}
	heal()
	s.expectReadable(t, entries, errs)
	// The sink must recover by itself: the same entries publish now.
	s.publishOK(t, entries)
	s.expectReadable(t, entries, nil)
}

// stallFault returns the harness's first Stalls fault, skipping t when
// there is none.
func stallFault(t *testing.T, s *env) Fault {
	t.Helper()
	for _, f := range s.h.Faults() {
		if f.Stalls && !f.PerEntry && f.Apply != nil {
			return f
		}
	}
	t.Skip("the harness offers no Stalls fault (Harness.Faults): nothing can keep messages in flight")
	return Fault{}
}

// cancelBeforeCall: Publish with a context cancelled before the call
// returns at once; an entry it reports published is readable, an entry it
// fails is failed retryable (a cancellation must not park an entry).
func cancelBeforeCall(t *testing.T, s *env) {
	entries := s.distinct(5)
	ctx, cancel := context.WithCancel(s.ctx)
	cancel()
	errs := s.publishWithin(t, ctx, entries, waitLimit)
	for i, err := range errs {
		if err != nil && backoff.ClassOf(err) == backoff.ClassPermanent {
			t.Errorf("entry %s failed permanently for a cancelled context: %v; a cancellation must be retryable", entries[i].ID, err)
		}
	}
	s.expectReadable(t, entries, errs)
}

// cancelWhileStalled: with the broker stalled, cancelling Publish's
// context makes it return promptly with every entry failed, retryable.
func cancelWhileStalled(t *testing.T, s *env) {
	f := stallFault(t, s)
	entries := s.distinct(10)
	heal := s.apply(t, f, nil)
	ctx, cancel := context.WithCancelCause(s.ctx)
	// The entries are handed to the broker before the cancel, as far as
	// the broker lets them: it takes no message while stalled.
	timer := time.AfterFunc(stallPublishTimeout, func() { cancel(errors.New("sinksuite: cancelled by the case")) })
	defer timer.Stop()
	errs := s.publishWithin(t, ctx, entries, waitLimit)
	for i, err := range errs {
		switch {
		case err == nil:
			t.Errorf("entry %s reported published while the broker was stalled (fault %q)", entries[i].ID, f.Name)
		case backoff.ClassOf(err) == backoff.ClassPermanent:
			t.Errorf("entry %s failed permanently when its context was cancelled: %v; want retryable", entries[i].ID, err)
		}
	}
	heal()
	s.publishOK(t, entries)
	s.expectReadable(t, entries, nil)
}

// landingNothingLater: a sink that reports a LandingBound of 0 or more
// has nothing land later than that after Publish returned. The broker is
// stalled while Publish runs (its messages stay in flight) and healed as
// soon as it returns; the suite takes a snapshot when the bound has
// passed and another landingSlack later: nothing new may be in it.
func landingNothingLater(t *testing.T, s *env) {
	lb, ok := s.sink.(outbox.LandingBounder)
	if !ok {
		t.Skip("the sink does not implement outbox.LandingBounder")
	}
	bound := lb.LandingBound()
	if bound < 0 {
		t.Skipf("the sink's LandingBound is %v: unbounded, nothing to check", bound)
	}
	f := stallFault(t, s)
	entries := s.distinct(10)
	heal := s.apply(t, f, nil)
	ctx, cancel := context.WithTimeout(s.ctx, stallPublishTimeout)
	errs := s.publishWithin(t, ctx, entries, waitLimit)
	returned := time.Now()
	cancel()
	heal()
	time.Sleep(time.Until(returned.Add(bound)))
	before := s.read(t, 0, waitLimit)
	time.Sleep(landingSlack)
	after := s.read(t, 0, waitLimit)
	had, has := byID(before), byID(after)
	for _, e := range entries {
		if n, m := len(had[e.ID]), len(has[e.ID]); m > n {
			t.Errorf("entry %s landed more than LandingBound (%v) after Publish returned: %d copies then, %d %v later (Publish reported %v for it)", e.ID, bound, n, m, landingSlack, errOfID(entries, errs, e.ID))
		}
	}
	s.expectReadable(t, entries, errs)
}

func errOfID(entries []outbox.Entry, errs []error, id string) error {
	for i, e := range entries {
		if e.ID == id {
			return errs[i]
		}
	}
	return errors.New("sinksuite: not an entry of this Publish")
}
