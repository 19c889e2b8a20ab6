package natssink

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

// Publish implements [outbox.Sink]: it publishes the entries of msgs
// asynchronously to JetStream, each with Nats-Msg-Id set to its ID, waits
// until each is acknowledged or has failed, and returns one error per
// entry, nil for acknowledged ones (a message the stream dropped as a
// duplicate within its duplicate window is acknowledged too). Each error
// is marked with its [backoff.Class] (see [Classify]); the errors of ctx
// itself come back as they are.
//
// Entries of one non-empty Key are published one at a time, in slice
// order: an entry is published only once the previous entry of its key is
// acknowledged or failed permanently. When one fails with a retryable
// error, the key's later entries fail (transient) without being
// published. Entries of other keys, and entries without a key, are
// published concurrently, at most [Options.MaxPending] at a time over all
// concurrent calls.
//
// Publish returns by the earlier of ctx's end and PublishTimeout: entries
// not acknowledged by then fail, with ctx's error when ctx ended, else
// with a semi-transient error. A message already published may still be
// stored, up to [Sink.LandingBound] later, as a duplicate that the
// stream's duplicate window drops when the entry is published again.
// Publish does not retain msgs and is safe for concurrent use. After
// Close it fails every entry it has not published, with a transient error.
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	defer func() { s.health.Record(ctx, s.opts.Now(), errs) }()
	pctx, cancel := context.WithTimeout(ctx, s.opts.PublishTimeout)
	defer cancel()
	c := newCall(s, ctx, pctx, msgs, errs)
	c.run()
	return errs
}

// Entry states in a call.
const (
	waiting uint8 = iota // not published yet
	sent                 // published, not answered yet
	done                 // errs holds its outcome
)

// call is the state of one Publish call. Only the goroutine running
// Publish touches it. It waits for the acknowledgements itself, in publish
// order (a stream acknowledges the messages of one connection in the order
// it stores them), so a message costs no goroutine of its own.
type call struct {
	s         *Sink
	ctx, pctx context.Context // the caller's; bounded by PublishTimeout
	msgs      []outbox.Entry
	errs      []error
	subjects  []string
	state     []uint8
	next      []int // the next entry of the same key, or -1
	ready     []int // entries that may be published now, in order
	left      int   // entries not done
	// inflight are the entries published and not yet answered, in publish
	// order, with their futures; each holds a slot.
	inflight []sentMsg
	streams  map[string]streamLookup // by subject, looked up on failures
}

// sentMsg is a published message awaiting its answer.
type sentMsg struct {
	i   int
	paf jetstream.PubAckFuture
}

func newCall(s *Sink, ctx, pctx context.Context, msgs []outbox.Entry, errs []error) *call {
	c := &call{
		s: s, ctx: ctx, pctx: pctx, msgs: msgs, errs: errs,
		subjects: make([]string, len(msgs)),
		state:    make([]uint8, len(msgs)),
		next:     make([]int, len(msgs)),
		ready:    make([]int, 0, len(msgs)),
		left:     len(msgs),
	}
	var last map[string]int // the latest entry of each key so far
	for i := range msgs {
		c.next[i] = -1
		k := msgs[i].Key
		if k == "" {
			c.ready = append(c.ready, i)
			continue
		}
		if last == nil {
			last = make(map[string]int)
		}
		if prev, ok := last[k]; ok {
			c.next[prev] = i
		} else {
			c.ready = append(c.ready, i)
		}
		last[k] = i
	}
	return c
}

// run publishes the entries as their keys allow and collects the answers,
// until every entry is done or pctx ends.
func (c *call) run() {
	for c.left > 0 {
		if c.pctx.Err() != nil {
			// Checked first: a select below would pick a free slot as
			// readily as an ended context, and publish after it.
			c.abandon()
			return
		}
		c.sendReady()
		var slot chan<- struct{}
		if len(c.ready) > 0 {
			slot = c.s.slots // nil (never ready) when nothing can be published
		}
		var ok <-chan *jetstream.PubAck
		var failed <-chan error
		if len(c.inflight) > 0 {
			ok, failed = c.inflight[0].paf.Ok(), c.inflight[0].paf.Err()
		}
		select {
		case slot <- struct{}{}:
			c.sendOne()
		case <-ok:
			c.answerHead(nil)
		case err := <-failed:
			c.answerHead(err)
		case <-c.pctx.Done():
			c.abandon()
			return
		case <-c.s.closed:
			c.abandonClosed()
			return
		}
	}
}

// sendReady publishes ready entries while slots are free, without
// waiting for one.
func (c *call) sendReady() {
	for len(c.ready) > 0 {
		select {
		case c.s.slots <- struct{}{}:
			c.sendOne()
		default:
			return
		}
	}
}

// sendOne publishes the first ready entry, holding a slot, which it gives
// back when the message is not published.
func (c *call) sendOne() {
	i := c.ready[0]
	c.ready = c.ready[1:]
	e := &c.msgs[i]
	m, err := c.s.message(e)
	if err == nil {
		c.subjects[i] = m.Subject
		var paf jetstream.PubAckFuture
		paf, err = c.s.publishAsync(m, e.ID)
		if err == nil {
			c.state[i] = sent
			c.inflight = append(c.inflight, sentMsg{i, paf})
			return
		}
	}
	<-c.s.slots
	c.answer(i, err)
}

// answerHead records the answer to the oldest message in flight and gives
// its slot back. The JetStream context's PublishAsyncTimeout
// (PublishTimeout) fails a message that gets no answer, so one comes.
func (c *call) answerHead(err error) {
	head := c.inflight[0]
	c.inflight = c.inflight[1:]
	<-c.s.slots
	c.answer(head.i, err)
}

// release gives back, once each is answered (or the sink closed), the
// slots of the messages still in flight when Publish stops waiting for
// them: nats.go still counts them against its own pending bound.
func (c *call) release() {
	for _, m := range c.inflight {
		go c.s.await(m.paf)
	}
	c.inflight = nil
}

// publishAsync hands m to nats.go, unless the sink is closed.
func (s *Sink) publishAsync(m *nats.Msg, id string) (jetstream.PubAckFuture, error) {
	s.closing.RLock()
	defer s.closing.RUnlock()
	select {
	case <-s.closed:
		return nil, errClosed
	default:
	}
	// No retries of "no responders" inside nats.go: they would send the
	// message again later, out of the sink's sight; the sink finds out
	// itself whether the subject has a stream (see noResponders).
	return s.js.PublishMsgAsync(m, jetstream.WithMsgID(id), jetstream.WithRetryAttempts(0))
}

// await waits for the answer to a message a Publish call stopped waiting
// for, then gives its slot back; Close ends the wait.
func (s *Sink) await(paf jetstream.PubAckFuture) {
	select {
	case <-paf.Ok():
	case <-paf.Err():
	case <-s.closed:
	}
	<-s.slots
}

// errClosed fails what Publish does not publish, or is not answered,
// because the sink was closed.
var errClosed = backoff.Transient(errors.New("natssink: the sink was closed; entries are published by a new sink"))

// answer records the answer to entry i and lets the key's next entry go,
// or fails the key's later entries when i failed with a retryable error.
func (c *call) answer(i int, err error) {
	if c.state[i] == done {
		return
	}
	c.state[i] = done
	c.left--
	if err != nil {
		c.errs[i] = c.failure(i, err)
		if backoff.ClassOf(c.errs[i]) != backoff.ClassPermanent {
			c.failLater(i)
			return
		}
	}
	if n := c.next[i]; n >= 0 {
		c.ready = append(c.ready, n)
	}
}

// failLater fails the entries of i's key after i, unpublished: publishing
// one of them now would put it ahead of i's retry.
func (c *call) failLater(i int) {
	for j := c.next[i]; j >= 0; j = c.next[j] {
		if c.state[j] == done {
			continue
		}
		c.state[j] = done
		c.left--
		c.errs[j] = backoff.Transient(fmt.Errorf("natssink: entry %s not published: entry %s of its key failed first, and publishing this one now would put it ahead of that one's retry", c.msgs[j].ID, c.msgs[i].ID))
	}
}

// abandon fails the entries not done when pctx ended: with ctx's error
// when the caller's context ended, else semi-transient.
func (c *call) abandon() {
	c.release()
	ctxErr := c.ctx.Err()
	for i := range c.msgs {
		switch {
		case c.state[i] == done:
			continue
		case ctxErr != nil:
			c.errs[i] = ctxErr
		case c.state[i] == sent:
			c.errs[i] = backoff.SemiTransient(fmt.Errorf("%s: %w", c.s.opts.notAcknowledged(c.msgs[i].ID), context.DeadlineExceeded))
		default:
			c.errs[i] = backoff.SemiTransient(fmt.Errorf("natssink: entry %s not published within %s %v: it waited for an earlier entry of its key, or for one of the %d slots of %s (the server is slow): %w",
				c.msgs[i].ID, c.s.opts.name("PublishTimeout"), c.s.opts.PublishTimeout, c.s.opts.MaxPending, c.s.opts.name("MaxPending"), context.DeadlineExceeded))
		}
		c.state[i] = done
	}
	c.left = 0
}

// notAcknowledged is the text of the error of entry id when its
// acknowledgement did not come within PublishTimeout.
func (o Options) notAcknowledged(id string) string {
	return fmt.Sprintf("natssink: entry %s not acknowledged within %s %v (the server is unreachable or slow, or the stream has no leader; it may still be stored, and the stream's duplicate window drops it when it is published again)",
		id, o.name("PublishTimeout"), o.PublishTimeout)
}

// abandonClosed fails the entries not done when the sink was closed.
func (c *call) abandonClosed() {
	c.release()
	for i := range c.msgs {
		if c.state[i] != done {
			c.errs[i], c.state[i] = errClosed, done
		}
	}
	c.left = 0
}

// message builds the message of e, or returns the permanent error of an
// entry that cannot become one.
func (s *Sink) message(e *outbox.Entry) (*nats.Msg, error) {
	subj := s.opts.Subject(*e)
	if why := badSubject(subj); why != "" {
		return nil, backoff.Permanent(fmt.Errorf("natssink: entry %s (topic %q) maps to subject %q, which %s; map its topic to a literal NATS subject with %s", e.ID, e.Topic, subj, why, s.opts.name("Subject")))
	}
	if strings.ContainsAny(e.ID, "\r\n") {
		return nil, backoff.Permanent(fmt.Errorf("natssink: entry %q has a line break in its ID, which headers %q and %s cannot carry; append it again with another ID", e.ID, s.opts.IDHeader, jetstream.MsgIDHeader))
	}
	h := make(nats.Header, len(e.Headers)+2)
	for k, v := range e.Headers {
		if k == s.opts.IDHeader || k == s.opts.KeyHeader || k == jetstream.MsgIDHeader {
			continue
		}
		if strings.ContainsAny(k, ":\r\n ") || k == "" || strings.ContainsAny(v, "\r\n") {
			return nil, backoff.Permanent(fmt.Errorf("natssink: entry %s has header %q, which NATS cannot carry (a header name must be non-empty without ':', spaces or line breaks, and a value without line breaks); remove or rename it, then requeue", e.ID, k))
		}
		h[k] = []string{v}
	}
	h[s.opts.IDHeader] = []string{e.ID}
	if e.Key != "" {
		if strings.ContainsAny(e.Key, "\r\n") {
			return nil, backoff.Permanent(fmt.Errorf("natssink: entry %s has a key with a line break, which header %q cannot carry; change the key, then requeue", e.ID, s.opts.KeyHeader))
		}
		h[s.opts.KeyHeader] = []string{e.Key}
	}
	// The payload is not copied: nats.go writes it to its buffer in
	// PublishMsgAsync and never reads it again (nothing is retried inside
	// nats.go, see send).
	return &nats.Msg{Subject: subj, Header: h, Data: e.Payload}, nil
}

// badSubject says what is wrong with subj as a subject to publish to, or
// "" when nothing is.
func badSubject(subj string) string {
	switch {
	case subj == "":
		return "is empty"
	case strings.ContainsAny(subj, " \t\r\n"):
		return "contains whitespace"
	}
	for tok := range strings.SplitSeq(subj, ".") {
		switch tok {
		case "":
			return "has an empty token"
		case "*", ">":
			return "has a wildcard token"
		}
	}
	return ""
}
