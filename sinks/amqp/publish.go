package amqpsink

import (
	"context"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

var seed = maphash.MakeSeed()

// Publish implements [outbox.Sink]: it publishes msgs with publisher
// confirms and returns one error per message, nil when the broker
// confirmed it (a basic.ack that no basic.return preceded). It returns when
// every message is confirmed or has failed, when ctx ends or when
// [Options.PublishTimeout] passes; messages not confirmed by then fail
// (see the package documentation, "Deadlines"). Each error carries its
// class (see [Classify]); ctx's own error passes through wrapped.
//
// Messages of one Topic and Key go to one channel, in slice order; see
// [Sink.KeepsKeyOrder]. Publish does not retain msgs. It is safe for
// concurrent use; an empty msgs returns nil errors at once. After Close
// every message fails with an error wrapping [outbox.ErrClosed].
func (s *Sink) Publish(ctx context.Context, msgs []outbox.Entry) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	defer func() { s.health.Record(ctx, s.opts.Now(), errs) }()
	pctx := ctx
	if s.opts.PublishTimeout > 0 {
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, s.opts.PublishTimeout)
		defer cancel()
	}
	sess, err := s.session(pctx)
	if err != nil {
		err = s.classified(err)
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	groups := make(map[int][]int, len(s.slots))
	for i := range msgs {
		k := s.slotOf(&msgs[i])
		groups[k] = append(groups[k], i)
	}
	var wg sync.WaitGroup
	for k, idx := range groups {
		wg.Go(func() { s.publishOn(pctx, sess, s.slots[k], msgs, idx, errs) })
	}
	wg.Wait()
	s.parkOvertaken(msgs, errs)
	return errs
}

// slotOf is the slot of an entry: by its topic and key, so that a key
// always publishes on one channel, or by its ID when it has no key.
func (s *Sink) slotOf(e *outbox.Entry) int {
	var h maphash.Hash
	h.SetSeed(seed)
	if e.Key != "" {
		_, _ = h.WriteString(e.Topic)
		_ = h.WriteByte(0)
		_, _ = h.WriteString(e.Key)
	} else {
		_, _ = h.WriteString(e.ID)
	}
	return int(h.Sum64() % uint64(len(s.slots)))
}

// publishOn publishes the messages msgs[idx...] on sl, in order, and waits
// for their confirms.
func (s *Sink) publishOn(ctx context.Context, sess *session, sl *slot, msgs []outbox.Entry, idx []int, errs []error) {
	ps := make([]*pending, len(idx))
	chans := map[*pubChan]bool{}
	s.writeAll(ctx, sess, sl, msgs, idx, errs, ps, chans)
	if waitAll(ctx, ps, errs, idx) {
		return
	}
	// Given up: close the channels still holding messages of this call so
	// that none of them is routed later than the landing bound, then fail
	// what is left with ctx's error.
	var wg sync.WaitGroup
	for pc := range chans {
		wg.Go(func() { pc.abort(s.opts.CloseTimeout) })
	}
	wg.Wait()
	for j, p := range ps {
		if p == nil {
			continue
		}
		<-p.res // the channel's end gave it one
		errs[idx[j]] = s.gaveUp(ctx, msgs[idx[j]].ID)
	}
}

// writeAll writes the messages msgs[idx...] on sl, in order, into ps and
// chans. A write blocks while the socket is full (a broker that stopped
// reading); should it still block CloseTimeout after ctx ended, the
// connection is dropped, which ends the write.
func (s *Sink) writeAll(ctx context.Context, sess *session, sl *slot, msgs []outbox.Entry, idx []int, errs []error, ps []*pending, chans map[*pubChan]bool) {
	written := make(chan struct{})
	defer close(written)
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(s.opts.CloseTimeout)
		defer t.Stop()
		select {
		case <-written:
		case <-t.C:
			sess.abort()
		}
	})
	defer stop()
	var failedKeys map[string]bool // keys of this group with a failure known
	var used *pubChan              // the channel of the call's earlier messages
	for j, i := range idx {
		e := &msgs[i]
		if e.Key != "" && failedKeys[e.Key] {
			errs[i] = s.classified(fmt.Errorf("%w: an earlier entry of key %q in this call failed; not published, to keep the key's order", ErrConnectionLost, e.Key))
			continue
		}
		p, pc, err := s.publishOne(ctx, sess, sl, e, used)
		if err != nil {
			errs[i] = err
			if e.Key != "" {
				if failedKeys == nil {
					failedKeys = map[string]bool{}
				}
				failedKeys[e.Key] = true
			}
			continue
		}
		ps[j] = p
		chans[pc] = true
		used = pc
	}
}

// publishOne waits for room (MaxPending) and for the connection to be
// unblocked, then writes e on sl.
func (s *Sink) publishOne(ctx context.Context, sess *session, sl *slot, e *outbox.Entry, expect *pubChan) (*pending, *pubChan, error) {
	exchange, key := s.opts.Exchange(*e), s.opts.RoutingKey(*e)
	if err := s.checkNames(e, exchange, key); err != nil {
		return nil, nil, err
	}
	select {
	case s.pending <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, s.gaveUp(ctx, e.ID)
	}
	if err := sess.waitUnblocked(ctx); err != nil {
		<-s.pending
		return nil, nil, s.classified(err)
	}
	msg := s.message(e)
	p := &pending{exchange: exchange, key: key, id: e.ID, size: len(e.Payload), res: make(chan error, 1)}
	pc, err := sl.publish(ctx, sess, exchange, key, msg, p, expect)
	if err != nil {
		<-s.pending
		return nil, nil, s.classified(err)
	}
	return p, pc, nil
}

// maxShortstr is the longest AMQP short string: exchange names, routing
// keys, message IDs and header names.
const maxShortstr = 255

// checkNames fails permanently an entry whose exchange, routing key or ID
// AMQP cannot carry.
func (s *Sink) checkNames(e *outbox.Entry, exchange, key string) error {
	var what, option string
	switch {
	case len(exchange) > maxShortstr:
		what, option = "exchange name", "Exchange"
	case len(key) > maxShortstr:
		what, option = "routing key", "RoutingKey"
	case len(e.ID) > maxShortstr:
		what, option = "entry ID (the message_id)", ""
	default:
		for k := range e.Headers {
			if len(k) > maxShortstr {
				return backoff.Permanent(fmt.Errorf("amqpsink: entry %s: its header name %.40q... is over AMQP's %d bytes; shorten it, then requeue the parked entry", e.ID, k, maxShortstr))
			}
		}
		return nil
	}
	fix := "shorten it"
	if option != "" {
		fix = "map it to a shorter one with " + s.opts.name(option)
	}
	return backoff.Permanent(fmt.Errorf("amqpsink: entry %s: its %s is over AMQP's %d bytes; %s, then requeue the parked entry", e.ID, what, maxShortstr, fix))
}

// gaveUp is the error of a message Publish stopped waiting for.
func (s *Sink) gaveUp(ctx context.Context, id string) error {
	err := ctx.Err()
	if err == nil {
		err = context.DeadlineExceeded
	}
	return s.classified(fmt.Errorf("amqpsink: entry %s: no confirm from the broker before the publish ended (%s %v, or the caller's deadline); it may still have been written, a duplicate on retry: %w", id, s.opts.name("PublishTimeout"), s.opts.PublishTimeout, err))
}

// message builds the AMQP message of e: persistent, message_id = the
// entry ID, the entry's headers plus the ID header.
func (s *Sink) message(e *outbox.Entry) amqp.Publishing {
	h := make(amqp.Table, len(e.Headers)+1)
	for _, k := range slices.Sorted(maps.Keys(e.Headers)) {
		if k != s.opts.IDHeader {
			h[k] = e.Headers[k]
		}
	}
	h[s.opts.IDHeader] = e.ID
	return amqp.Publishing{
		Headers:      h,
		DeliveryMode: amqp.Persistent,
		MessageId:    e.ID,
		Timestamp:    e.CreatedAt,
		Body:         e.Payload,
	}
}

// classified marks err with the class Options.Classify gives it, keeping
// ctx errors recognisable with errors.Is.
func (s *Sink) classified(err error) error {
	if err == nil {
		return nil
	}
	return backoff.Mark(err, s.opts.Classify(err))
}
