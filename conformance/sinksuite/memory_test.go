package sinksuite_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	"github.com/outboxrelay/outbox/conformance/sinksuite"
)

// The suite's own tests run it against an in-memory broker and a sink
// over it (the reference, which must pass every case), and against
// deliberately broken variants of that sink (broken_test.go), which it
// must reject.

// memBroker is an in-memory broker with one destination. Its faults are
// what memHarness offers.
type memBroker struct {
	msgLog
	mu       sync.Mutex // guards the faults
	maxBytes int
	failIDs  map[string]error // per-entry faults
	down     bool             // every write fails, transient
	missing  bool             // the destination is gone: every write fails, permanent
	stall    chan struct{}    // non-nil while stalled; closed by the heal
}

func newMemBroker() *memBroker {
	return &memBroker{maxBytes: 1 << 20, failIDs: map[string]error{}}
}

// memIDHeader is the header the memory sink puts the entry ID in.
const memIDHeader = "mem-id"

// write writes e, or fails as the faults say. While stalled it waits for
// the heal or ctx (unless ignoreCtx).
func (b *memBroker) write(ctx context.Context, e outbox.Entry, ignoreCtx bool) error {
	b.mu.Lock()
	for b.stall != nil {
		st := b.stall
		b.mu.Unlock()
		if ignoreCtx {
			<-st
		} else {
			select {
			case <-st:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		b.mu.Lock()
	}
	err := b.faultLocked(e)
	b.mu.Unlock()
	if err == nil {
		b.store(e)
	}
	return err
}

// faultLocked returns the error the faults give e, or nil.
func (b *memBroker) faultLocked(e outbox.Entry) error {
	switch {
	case b.failIDs[e.ID] != nil:
		return b.failIDs[e.ID]
	case b.missing:
		return backoff.Permanent(fmt.Errorf("membroker: no destination for topic %q; create it, or map the topic elsewhere with Options.Topic", e.Topic))
	case b.down:
		return backoff.Transient(errors.New("membroker: broker unavailable"))
	case len(e.Payload) > b.maxBytes:
		return backoff.Permanent(fmt.Errorf("membroker: message of %d bytes is over the broker's limit of %d; raise Options.MaxMessageBytes", len(e.Payload), b.maxBytes))
	}
	return nil
}

// store stores e as a message, sharing nothing with it.
func (b *memBroker) store(e outbox.Entry) {
	e = e.Clone()
	h := maps.Clone(e.Headers)
	if h == nil {
		h = map[string]string{}
	}
	h[memIDHeader] = e.ID
	b.add(sinksuite.Message{ID: e.ID, Key: e.Key, Payload: e.Payload, Headers: h})
}

func (b *memBroker) set(f func()) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	f()
	return nil
}

// faults are the memory broker's faults.
func (b *memBroker) faults() []sinksuite.Fault {
	return []sinksuite.Fault{
		{
			Name: "TransientErrorForOneEntry", PerEntry: true,
			Apply: func(_ context.Context, e *outbox.Entry) (func(context.Context) error, error) {
				id := e.ID
				b.set(func() { b.failIDs[id] = backoff.Transient(errors.New("membroker: injected error")) })
				return func(context.Context) error { return b.set(func() { delete(b.failIDs, id) }) }, nil
			},
		},
		{
			Name: "MessageOverSizeLimit", PerEntry: true, Permanent: true, Mentions: []string{"MaxMessageBytes"},
			Apply: func(_ context.Context, e *outbox.Entry) (func(context.Context) error, error) {
				e.Payload = make([]byte, b.maxBytes+1)
				return func(context.Context) error { return nil }, nil
			},
		},
		{
			Name: "BrokerDown",
			Apply: func(context.Context, *outbox.Entry) (func(context.Context) error, error) {
				b.set(func() { b.down = true })
				return func(context.Context) error { return b.set(func() { b.down = false }) }, nil
			},
		},
		{
			Name: "NoDestination", Permanent: true, Mentions: []string{"Options.Topic"},
			Apply: func(context.Context, *outbox.Entry) (func(context.Context) error, error) {
				b.set(func() { b.missing = true })
				return func(context.Context) error { return b.set(func() { b.missing = false }) }, nil
			},
		},
		{
			Name: "Stalled", Stalls: true,
			Apply: func(context.Context, *outbox.Entry) (func(context.Context) error, error) {
				st := make(chan struct{})
				b.set(func() { b.stall = st })
				var once sync.Once
				return func(context.Context) error {
					once.Do(func() { b.set(func() { b.stall = nil; close(st) }) })
					return nil
				}, nil
			},
		},
	}
}

// memSink is the reference sink over a memBroker: it writes a call's
// entries one at a time in order, so it keeps key order, fails a key's
// later entries after a retryable failure, and has nothing in flight
// when Publish returns (LandingBound 0). A broken variant (broken_test.go)
// changes one thing.
type memSink struct {
	b       *memBroker
	variant string

	mu     sync.Mutex
	closed bool
	active sync.WaitGroup // Publish calls in progress
	buffer []outbox.Entry // close-drops-buffered: written later
	timer  *time.Timer    // close-drops-buffered: the flush
	count  atomic.Int64   // drops-every-7th: entries written
	sticky atomic.Bool    // sticky-failure: a write failed
}

var (
	_ outbox.Sink           = (*memSink)(nil)
	_ outbox.KeyOrderer     = (*memSink)(nil)
	_ outbox.LandingBounder = (*memSink)(nil)
)

func (s *memSink) KeepsKeyOrder() bool { return true }

func (s *memSink) LandingBound() time.Duration { return 0 }

var errClosed = fmt.Errorf("memsink: Publish after Close; make a new sink: %w", outbox.ErrClosed)

func (s *memSink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	if len(msgs) == 0 {
		return s.publishNone()
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return s.publishClosed(ctx, msgs)
	}
	s.active.Add(1)
	s.mu.Unlock()
	defer s.active.Done()
	errs := make([]error, len(msgs))
	failed := map[string]bool{} // keys with a retryable failure in this call
	for _, i := range s.order(msgs) {
		e := msgs[i]
		switch {
		case ctx.Err() != nil:
			errs[i] = s.ctxErr(ctx.Err())
		case e.Key != "" && failed[e.Key] && !s.is("keeps-key-after-failure"):
			errs[i] = s.laterOfKey(e)
		default:
			errs[i] = s.writeOne(ctx, e)
		}
		if errs[i] != nil && backoff.ClassOf(errs[i]) != backoff.ClassPermanent {
			failed[e.Key] = true
		}
	}
	return s.shorten(errs)
}

func (s *memSink) is(v string) bool { return s.variant == v }

// writeOne writes e and returns its classified error.
func (s *memSink) writeOne(ctx context.Context, e outbox.Entry) error {
	switch {
	case s.is("close-drops-buffered"):
		s.bufferEntry(e)
		return nil
	case s.is("drops-every-7th") && s.count.Add(1)%7 == 0:
		return nil
	case s.sticky.Load():
		return backoff.Transient(errors.New("memsink: the connection is broken"))
	}
	e = s.damage(e)
	err := s.b.write(ctx, e, s.is("ignores-ctx"))
	switch {
	case err == nil:
		if s.is("writes-twice") {
			s.b.store(e)
		}
		return nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		if s.is("lands-late") {
			go s.landLate(e)
		}
		return s.ctxErr(err)
	}
	return s.classify(err)
}

func (s *memSink) ctxErr(err error) error {
	err = fmt.Errorf("memsink: %w", err)
	if s.is("cancel-permanent") {
		return backoff.Permanent(err)
	}
	return err
}

func (s *memSink) laterOfKey(e outbox.Entry) error {
	if s.is("reports-later-published") {
		return nil
	}
	return backoff.Transient(fmt.Errorf("memsink: entry %s not published: an earlier entry of key %q failed in this call", e.ID, e.Key))
}

func (s *memSink) classify(err error) error {
	if s.is("sticky-failure") {
		s.sticky.Store(true)
	}
	err = fmt.Errorf("memsink: %w", err)
	permanent := backoff.ClassOf(err) == backoff.ClassPermanent
	switch {
	case s.is("permanent-as-transient") && permanent:
		return backoff.Transient(errors.New("memsink: publish failed"))
	case s.is("transient-as-permanent") && !permanent:
		return backoff.Permanent(err)
	case s.is("no-mention") && permanent:
		return backoff.Permanent(errors.New("memsink: the broker refused the message"))
	}
	return err
}

// publishNone answers an empty call.
func (s *memSink) publishNone() []error {
	if s.is("empty-writes") {
		s.b.store(outbox.Entry{ID: "empty-call"})
	}
	return nil
}

// publishClosed answers a call after Close.
func (s *memSink) publishClosed(ctx context.Context, msgs []outbox.Entry) []error {
	errs := make([]error, len(msgs))
	for i := range msgs {
		switch {
		case s.is("panics-after-close"):
			panic("memsink: closed")
		case s.is("writes-after-close"):
			errs[i] = s.b.write(ctx, msgs[i], false)
		default:
			errs[i] = errClosed
		}
	}
	return errs
}

// order returns the indexes of msgs in the order to write them.
func (s *memSink) order(msgs []outbox.Entry) []int {
	idx := make([]int, len(msgs))
	for i := range idx {
		idx[i] = i
	}
	if s.is("reorders-key") {
		slices.Reverse(idx)
	}
	return idx
}

// damage applies the variants that write something else than e.
func (s *memSink) damage(e outbox.Entry) outbox.Entry {
	switch s.variant {
	case "loses-headers":
		e.Headers = nil
	case "loses-traceparent":
		e.Headers = maps.Clone(e.Headers)
		delete(e.Headers, "traceparent")
	}
	return e
}

// shorten applies the variants that return the wrong number of errors.
func (s *memSink) shorten(errs []error) []error {
	if s.is("short-errors") && len(errs) > 1 {
		return errs[:len(errs)-1]
	}
	return errs
}

// landLate writes e once the broker is healed and a while has passed:
// later than the LandingBound (0) it reports.
func (s *memSink) landLate(e outbox.Entry) {
	for {
		s.b.mu.Lock()
		st := s.b.stall
		s.b.mu.Unlock()
		if st == nil {
			break
		}
		<-st
	}
	// A second after the heal: the suite's first look is at once
	// (LandingBound 0), its second landingSlack (2s) later.
	time.Sleep(time.Second)
	_ = s.b.write(context.Background(), e, false)
}

// bufferEntry is close-drops-buffered's write: it reports the entry
// published and writes it a second later, unless Close comes first
// (Close/KeepsPublished closes right after Publish returns).
func (s *memSink) bufferEntry(e outbox.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buffer = append(s.buffer, e.Clone())
	if s.timer == nil {
		s.timer = time.AfterFunc(time.Second, s.flush)
	}
}

func (s *memSink) flush() {
	s.mu.Lock()
	buf := s.buffer
	s.buffer, s.timer = nil, nil
	s.mu.Unlock()
	for _, e := range buf {
		_ = s.b.write(context.Background(), e, false)
	}
}

func (s *memSink) Close() error {
	s.mu.Lock()
	if s.closed && s.is("close-twice-panics") {
		s.mu.Unlock()
		panic("memsink: closed twice")
	}
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
		s.buffer, s.timer = nil, nil
	}
	s.mu.Unlock()
	s.active.Wait()
	return nil
}

// memHarness is a destination on a fresh memBroker.
type memHarness struct {
	b    *memBroker
	sink outbox.Sink
}

func (h memHarness) Sink() outbox.Sink { return h.sink }

func (h memHarness) Read(ctx context.Context, n int) ([]sinksuite.Message, error) {
	return h.b.Read(ctx, n)
}

func (h memHarness) Faults() []sinksuite.Fault { return h.b.faults() }

func newMemHarness(variant string) sinksuite.NewHarness {
	return func(t *testing.T, _ sinksuite.Config) sinksuite.Harness {
		b := newMemBroker()
		s := &memSink{b: b, variant: variant}
		var sink outbox.Sink = s
		if variant == "retains-input" {
			sink = retainingSink{s}
		}
		t.Cleanup(func() {
			defer func() { _ = recover() }() // close-twice-panics
			_ = s.Close()
		})
		return memHarness{b: b, sink: sink}
	}
}

// retainingSink stores the caller's payload and headers in the broker
// instead of copies (the retains-input variant).
type retainingSink struct{ *memSink }

func (s retainingSink) Publish(_ context.Context, msgs []outbox.Entry) []error {
	for _, e := range msgs {
		e.Headers[memIDHeader] = e.ID
		s.b.add(sinksuite.Message{ID: e.ID, Key: e.Key, Payload: e.Payload, Headers: e.Headers})
	}
	return make([]error, len(msgs))
}

// TestMemory runs the suite against the reference sink: every case must
// pass.
func TestMemory(t *testing.T) {
	t.Parallel()
	sinksuite.Run(t, newMemHarness(""))
}
