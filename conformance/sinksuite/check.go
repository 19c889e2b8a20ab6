package sinksuite

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

// publish calls Publish with ctx and checks that it returns one error per
// entry without panicking. A panic fails the case (t.Errorf) and counts
// as an error for every entry.
func (s *env) publish(t *testing.T, ctx context.Context, msgs []outbox.Entry) []error {
	t.Helper()
	errs, panicked := s.tryPublish(ctx, msgs)
	if panicked != nil {
		t.Errorf("Publish of %d entries panicked: %v", len(msgs), panicked)
	}
	if len(errs) != len(msgs) {
		t.Fatalf("Publish of %d entries returned %d errors; it must return one error per entry, in order", len(msgs), len(errs))
	}
	return errs
}

// tryPublish calls Publish, turning a panic into every entry's error.
func (s *env) tryPublish(ctx context.Context, msgs []outbox.Entry) (errs []error, panicked any) {
	defer func() {
		if p := recover(); p != nil {
			panicked = p
			errs = make([]error, len(msgs))
			for i := range errs {
				errs[i] = fmt.Errorf("sinksuite: Publish panicked: %v", p)
			}
		}
	}()
	return s.sink.Publish(ctx, msgs), nil
}

// publishOK publishes msgs with the case's context and requires every
// entry to be reported published.
func (s *env) publishOK(t *testing.T, msgs []outbox.Entry) {
	t.Helper()
	errs := s.publish(t, s.ctx, msgs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Publish: entry %d (%s, key %q) failed with no fault injected: %v", i, msgs[i].ID, msgs[i].Key, err)
		}
	}
}

// publishNoFault publishes entries with the case's context from any
// goroutine (it reports with t.Errorf, never t.Fatal): a panic or a
// failed entry fails the case. It returns false on a panic.
func (s *env) publishNoFault(t *testing.T, entries []outbox.Entry) bool {
	errs, panicked := s.tryPublish(s.ctx, entries)
	if panicked != nil {
		t.Errorf("concurrent Publish panicked: %v", panicked)
		return false
	}
	if len(errs) != len(entries) {
		t.Errorf("Publish of %d entries returned %d errors; want one per entry", len(entries), len(errs))
		return true
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("concurrent Publish: entry %s failed with no fault injected: %v", entries[i].ID, err)
		}
	}
	return true
}

// concurrently runs workers goroutines that each publish calls calls in
// a row, the entries of call c of worker w made by entries(w, c), and
// returns every entry published, each worker's in its order.
func (s *env) concurrently(t *testing.T, workers, calls int, entries func(w, c int) []outbox.Entry) []outbox.Entry {
	var (
		mu  sync.Mutex
		all []outbox.Entry
		wg  sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for c := range calls {
				es := entries(w, c)
				if !s.publishNoFault(t, es) {
					return
				}
				mu.Lock()
				all = append(all, es...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return all
}

// apply turns f on (for e; nil for a destination-wide fault), registers
// its heal with t.Cleanup and returns the heal for the case to call.
func (s *env) apply(t *testing.T, f Fault, e *outbox.Entry) (heal func()) {
	t.Helper()
	h, err := f.Apply(s.ctx, e)
	if err != nil {
		t.Fatalf("fault %q: Apply: %v", f.Name, err)
	}
	t.Cleanup(func() { _ = h(context.WithoutCancel(s.ctx)) })
	return func() {
		t.Helper()
		if err := h(s.ctx); err != nil {
			t.Fatalf("fault %q: heal: %v", f.Name, err)
		}
	}
}

// read reads the destination, waiting up to wait for at least n messages.
func (s *env) read(t *testing.T, n int, wait time.Duration) []Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, wait)
	defer cancel()
	msgs, err := s.h.Read(ctx, n)
	if err != nil {
		t.Fatalf("Harness.Read: %v", err)
	}
	return msgs
}

// byID groups messages by their ID, in read order.
func byID(msgs []Message) map[string][]Message {
	out := map[string][]Message{}
	for _, m := range msgs {
		out[m.ID] = append(out[m.ID], m)
	}
	return out
}

// expectReadable waits for the entries whose error is nil (all of them
// when errs is nil) and checks each was written with its ID, key, payload
// and headers. It returns what it read.
func (s *env) expectReadable(t *testing.T, entries []outbox.Entry, errs []error) []Message {
	t.Helper()
	want := okEntries(entries, errs)
	msgs := s.read(t, len(want), waitLimit)
	got := byID(msgs)
	missing := 0
	for _, e := range want {
		copies := got[e.ID]
		if len(copies) == 0 {
			missing++
			if missing <= 5 {
				t.Errorf("entry %s (key %q) was reported published (nil error) but is not on the broker after %v", e.ID, e.Key, waitLimit)
			}
			continue
		}
		if d := sameMessage(e, copies[0]); d != "" {
			t.Errorf("entry %s came back different: %s", e.ID, d)
		}
	}
	if missing > 5 {
		t.Errorf("... %d of %d entries reported published are missing in all", missing, len(want))
	}
	return msgs
}

// okEntries returns the entries whose error is nil (all when errs is nil).
func okEntries(entries []outbox.Entry, errs []error) []outbox.Entry {
	var out []outbox.Entry
	for i, e := range entries {
		if errs == nil || errs[i] == nil {
			out = append(out, e)
		}
	}
	return out
}

// sameMessage says how m differs from e ("" if it carries e's ID, key,
// payload and every header of e).
func sameMessage(e outbox.Entry, m Message) string {
	var d []string
	if m.ID != e.ID {
		d = append(d, fmt.Sprintf("ID %q, want %q", m.ID, e.ID))
	}
	if m.Key != e.Key {
		d = append(d, fmt.Sprintf("key %q, want %q", m.Key, e.Key))
	}
	if !bytes.Equal(m.Payload, e.Payload) {
		d = append(d, fmt.Sprintf("payload %q, want %q", m.Payload, e.Payload))
	}
	for _, k := range slices.Sorted(maps.Keys(e.Headers)) {
		v, ok := m.Headers[k]
		switch {
		case !ok:
			d = append(d, fmt.Sprintf("header %q missing (want %q)", k, e.Headers[k]))
		case v != e.Headers[k]:
			d = append(d, fmt.Sprintf("header %q = %q, want %q", k, v, e.Headers[k]))
		}
	}
	return strings.Join(d, "; ")
}

// expectOnce checks that each of entries is on the broker exactly once.
func expectOnce(t *testing.T, msgs []Message, entries []outbox.Entry) {
	t.Helper()
	got := byID(msgs)
	for _, e := range entries {
		if n := len(got[e.ID]); n > 1 {
			t.Errorf("entry %s was written %d times by one successful Publish with no fault; want once", e.ID, n)
		}
	}
}

// expectKeyOrder checks that the messages of each key of entries are in
// the entries' order. A message seen again (a duplicate) counts where it
// was first seen; entries not on the broker are ignored.
func expectKeyOrder(t *testing.T, msgs []Message, entries []outbox.Entry) {
	t.Helper()
	pos := map[string]int{}
	keyOf := map[string]string{}
	for i, e := range entries {
		pos[e.ID] = i
		keyOf[e.ID] = e.Key
	}
	last := map[string]string{} // key -> ID of the last new message of it
	seen := map[string]bool{}
	for _, m := range msgs {
		i, ok := pos[m.ID]
		if !ok || seen[m.ID] {
			continue
		}
		seen[m.ID] = true
		k := keyOf[m.ID]
		if k == "" {
			continue
		}
		if prev, ok := last[k]; ok && pos[prev] > i {
			t.Errorf("key %q out of order on the broker: %s (entry %d of the call) came after %s (entry %d)", k, m.ID, i, prev, pos[prev])
		}
		last[k] = m.ID
	}
}

// expectAbsent checks that none of ids is in msgs.
func expectAbsent(t *testing.T, msgs []Message, ids []string, why string) {
	t.Helper()
	got := byID(msgs)
	for _, id := range ids {
		if n := len(got[id]); n > 0 {
			t.Errorf("entry %s is on the broker (%d copies), but %s", id, n, why)
		}
	}
}

// expectClass checks that err is non-nil and of the fault's class, and
// that a permanent error names what the fault says.
func expectClass(t *testing.T, f Fault, what string, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: nil error during fault %q; want a %s error", what, f.Name, classWord(f.Permanent))
		return
	}
	c := backoff.ClassOf(err)
	if f.Permanent != (c == backoff.ClassPermanent) {
		t.Errorf("%s: during fault %q the error is %s (%v); want %s", what, f.Name, c, err, classWord(f.Permanent))
		return
	}
	if !f.Permanent {
		return
	}
	for _, m := range f.Mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: the permanent error of fault %q does not mention %q (what to configure): %v", what, f.Name, m, err)
		}
	}
}

func classWord(permanent bool) string {
	if permanent {
		return "permanent"
	}
	return "retryable (transient or semi-transient)"
}

// ids returns the IDs of entries.
func ids(entries []outbox.Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.ID
	}
	return out
}

// closer returns the sink's Close as a func() error, or nil when it has
// none (neither Close() error nor Close()).
func closer(sink outbox.Sink) func() error {
	switch c := sink.(type) {
	case interface{ Close() error }:
		return c.Close
	case interface{ Close() }:
		return func() error { c.Close(); return nil }
	}
	return nil
}

// callClose calls close, failing t if it panics or does not return
// within waitLimit, and returns its error.
func callClose(t *testing.T, close func() error) error {
	t.Helper()
	type result struct {
		err      error
		panicked any
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{panicked: p}
			}
		}()
		done <- result{err: close()}
	}()
	select {
	case r := <-done:
		if r.panicked != nil {
			t.Errorf("Close panicked: %v", r.panicked)
		}
		return r.err
	case <-time.After(waitLimit):
		t.Fatalf("Close did not return within %v", waitLimit)
		return nil
	}
}

// publishWithin runs Publish in a goroutine and returns its errors; it
// fails t when Publish does not return within limit after ctx ended.
func (s *env) publishWithin(t *testing.T, ctx context.Context, msgs []outbox.Entry, limit time.Duration) []error {
	t.Helper()
	type result struct {
		errs     []error
		panicked any
	}
	res := make(chan result, 1)
	go func() {
		errs, p := s.tryPublish(ctx, msgs)
		res <- result{errs, p}
	}()
	var r result
	select {
	case r = <-res:
	case <-ctx.Done():
		select {
		case r = <-res:
		case <-time.After(limit):
			t.Fatalf("Publish did not return within %v after its context ended (%v); a cancelled context must fail the entries not acknowledged", limit, context.Cause(ctx))
		}
	}
	if r.panicked != nil {
		t.Errorf("Publish panicked: %v", r.panicked)
	}
	if len(r.errs) != len(msgs) {
		t.Fatalf("Publish of %d entries returned %d errors; want one per entry", len(msgs), len(r.errs))
	}
	return r.errs
}
