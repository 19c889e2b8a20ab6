package sinksuite_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/conformance/sinksuite"
)

// msgLog holds the messages of a test broker and reads them the way
// Harness.Read asks: everything so far, waiting for at least n.
type msgLog struct {
	mu      sync.Mutex
	msgs    []sinksuite.Message
	changed chan struct{} // closed and replaced when msgs grows; nil until then
}

func (l *msgLog) add(m sinksuite.Message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, m)
	if l.changed != nil {
		close(l.changed)
	}
	l.changed = make(chan struct{})
}

// Read implements Harness.Read.
func (l *msgLog) Read(ctx context.Context, n int) ([]sinksuite.Message, error) {
	for {
		l.mu.Lock()
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		msgs, changed := slices.Clone(l.msgs), l.changed
		l.mu.Unlock()
		if len(msgs) >= n {
			return msgs, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return msgs, nil
		}
	}
}

// chanHarness is a Harness for outbox.ChannelSink: the "broker" is a
// goroutine that takes every message off the channel and keeps it.
// TestChannelSink runs the suite on it.
type chanHarness struct {
	msgLog
	sink outbox.ChannelSink
}

func newChanHarness(t *testing.T, _ sinksuite.Config) sinksuite.Harness {
	h, stop := startChanHarness()
	t.Cleanup(stop)
	return h
}

// startChanHarness starts the harness's broker goroutine; stop closes
// the channel and waits for it.
func startChanHarness() (h *chanHarness, stop func()) {
	ch := make(chan outbox.Entry)
	h = &chanHarness{sink: ch}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range ch {
			h.add(sinksuite.Message{ID: e.ID, Key: e.Key, Payload: e.Payload, Headers: e.Headers})
		}
	}()
	return h, func() { close(ch); <-done }
}

func (h *chanHarness) Sink() outbox.Sink { return h.sink }

// Faults: none. The cases that need a fault are skipped.
func (h *chanHarness) Faults() []sinksuite.Fault { return nil }

// TestChannelSink runs the suite on outbox.ChannelSink through the
// example's harness: it passes the cases that apply to it (it keeps no key
// order, has no Close, no LandingBound and the harness no fault).
func TestChannelSink(t *testing.T) {
	sinksuite.Run(t, newChanHarness)
}

// A harness reads back what the sink published, as a consumer sees it.
// This is what the suite does in every case: publish, then Read and
// compare.
func ExampleHarness() {
	h, stop := startChanHarness()
	defer stop()

	errs := h.Sink().Publish(context.Background(), []outbox.Entry{
		{ID: "e1", Topic: "orders", Key: "order-7", Payload: []byte("created"), Headers: map[string]string{outbox.HeaderKeySeq: "1"}},
		{ID: "e2", Topic: "orders", Key: "order-8", Payload: []byte("paid")},
	})
	fmt.Println("errors:", errs)
	msgs, _ := h.Read(context.Background(), 2)
	for _, m := range msgs {
		fmt.Printf("%s key=%s payload=%s seq=%q\n", m.ID, m.Key, m.Payload, m.Headers[outbox.HeaderKeySeq])
	}
	// Output:
	// errors: [<nil> <nil>]
	// e1 key=order-7 payload=created seq="1"
	// e2 key=order-8 payload=paid seq=""
}
