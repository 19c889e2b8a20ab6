package amqpsink

import (
	"context"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A slot is one of the sink's publishing channels: the AMQP channel it
// currently publishes on, opened again when lost. Publishes on a slot are
// written one at a time (mu), so the broker sees them in the order they
// were written, and delivery tags follow that order.
type slot struct {
	sink *Sink
	mu   sync.Mutex
	pc   *pubChan
}

// pending is one published message waiting for its confirm.
type pending struct {
	exchange, key string // as published
	id            string
	size          int
	res           chan error // gets exactly one result
	returned      *amqp.Return
}

// pubChan is an AMQP channel in confirm mode and the messages published on
// it that the broker has not confirmed yet, by delivery tag.
type pubChan struct {
	sess *session
	ch   *amqp.Channel
	sink *Sink
	done chan struct{} // closed once every pending message has its result

	mu      sync.Mutex
	pending map[uint64]*pending
	byID    map[string][]uint64 // the tags of pending messages, by message_id
	dead    bool
}

// publish writes msg on the slot's channel, opening one when needed, and
// registers p for its confirm. It returns the channel p waits on, or an
// error when the message was not written.
//
// expect is the channel the call published its earlier messages on, nil
// for its first: when that channel has died, the message is not written on
// a new one, as it would then be routed after earlier messages of the call
// that failed (retryably) with the old channel.
func (sl *slot) publish(ctx context.Context, sess *session, exchange, key string, msg amqp.Publishing, p *pending, expect *pubChan) (*pubChan, error) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	pc := sl.pc
	if expect != nil && (pc != expect || pc.isDead()) {
		return nil, fmt.Errorf("%w: the channel closed during this publish call; the call's later messages of this channel are not published, to keep their keys' order", ErrConnectionLost)
	}
	if pc == nil || pc.isDead() || pc.sess != sess {
		var err error
		pc, err = sl.open(ctx, sess)
		if err != nil {
			return nil, err
		}
		sl.pc = pc
	}
	tag := pc.ch.GetNextPublishSeqNo()
	if !pc.add(tag, p) {
		return nil, fmt.Errorf("%w: the channel closed before the message was written", ErrConnectionLost)
	}
	if err := pc.ch.Publish(exchange, key, true, false, msg); err != nil {
		if pc.remove(tag) {
			return nil, fmt.Errorf("%w: writing the message: %w", ErrConnectionLost, err)
		}
		return pc, nil // the channel's end already failed it
	}
	return pc, nil
}

// open opens a channel in confirm mode on sess and starts its dispatcher.
// A broker that does not answer by ctx's end gets its connection dropped.
func (sl *slot) open(ctx context.Context, sess *session) (*pubChan, error) {
	type opened struct {
		ch  *amqp.Channel
		err error
	}
	res := make(chan opened, 1)
	go func() {
		ch, err := sess.conn.Channel()
		if err != nil {
			res <- opened{nil, fmt.Errorf("%w: opening a channel: %w", ErrConnectionLost, err)}
			return
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			res <- opened{nil, fmt.Errorf("amqpsink: the broker refused publisher confirms on a channel (confirm.select): %w", err)}
			return
		}
		res <- opened{ch, nil}
	}()
	var o opened
	select {
	case o = <-res:
	case <-ctx.Done():
		sess.abort()
		o = <-res
		if o.err == nil {
			_ = o.ch.Close()
		}
		return nil, fmt.Errorf("amqpsink: the broker did not open a channel before the publish ended (%s %v, or the caller's deadline); the connection was dropped: %w",
			sl.sink.opts.name("PublishTimeout"), sl.sink.opts.PublishTimeout, ctx.Err())
	}
	if o.err != nil {
		return nil, o.err
	}
	ch := o.ch
	// The client drops a notification its listener does not take within
	// 5s: the buffers hold one per message that can be pending, so the
	// client never waits on them.
	n := sl.sink.opts.MaxPending + 16
	pc := &pubChan{
		sess: sess, ch: ch, sink: sl.sink, done: make(chan struct{}),
		pending: map[uint64]*pending{}, byID: map[string][]uint64{},
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, n))
	returns := ch.NotifyReturn(make(chan amqp.Return, n))
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	go pc.dispatch(confirms, returns, closes)
	return pc, nil
}

func (pc *pubChan) isDead() bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.dead
}

func (pc *pubChan) add(tag uint64, p *pending) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.dead {
		return false
	}
	pc.pending[tag] = p
	pc.byID[p.id] = append(pc.byID[p.id], tag)
	return true
}

// remove forgets the message of tag; it reports whether it was pending.
func (pc *pubChan) remove(tag uint64) bool {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.take(tag) != nil
}

// take removes and returns the pending message of tag, or nil. pc.mu held.
func (pc *pubChan) take(tag uint64) *pending {
	p := pc.pending[tag]
	if p == nil {
		return nil
	}
	delete(pc.pending, tag)
	tags := pc.byID[p.id]
	for i, t := range tags {
		if t == tag {
			tags = append(tags[:i], tags[i+1:]...)
			break
		}
	}
	if len(tags) == 0 {
		delete(pc.byID, p.id)
	} else {
		pc.byID[p.id] = tags
	}
	return p
}

// dispatch hands every confirm to its message. The broker sends a
// message's basic.return before its basic.ack, and the client passes them
// on in that order; the returns are drained before each confirm is
// handled, so a returned message is known as such when its ack arrives.
func (pc *pubChan) dispatch(confirms <-chan amqp.Confirmation, returns <-chan amqp.Return, closes <-chan *amqp.Error) {
	for {
		select {
		case r, ok := <-returns:
			if ok {
				pc.returned(r)
			} else {
				returns = nil
			}
		case c, ok := <-confirms:
			if !ok {
				pc.fail(<-closes)
				return
			}
			pc.drainReturns(returns)
			pc.confirm(c)
		}
	}
}

func (pc *pubChan) drainReturns(returns <-chan amqp.Return) {
	for returns != nil {
		select {
		case r, ok := <-returns:
			if !ok {
				return
			}
			pc.returned(r)
		default:
			return
		}
	}
}

// returned marks the first pending message with the return's message_id
// that is not marked yet.
func (pc *pubChan) returned(r amqp.Return) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, tag := range pc.byID[r.MessageId] {
		if p := pc.pending[tag]; p.returned == nil {
			p.returned = &r
			return
		}
	}
}

func (pc *pubChan) confirm(c amqp.Confirmation) {
	pc.mu.Lock()
	p := pc.take(c.DeliveryTag)
	pc.mu.Unlock()
	if p == nil {
		return
	}
	switch {
	case p.returned != nil:
		p.result(pc.sink.classified(unroutable(p.returned)))
	case !c.Ack:
		p.result(pc.sink.classified(fmt.Errorf("%w: exchange %q, routing key %q: a queue refused it (a queue at its x-max-length with x-overflow reject-publish, or a queue without a leader); it is retried", ErrNacked, p.exchange, p.key)))
	default:
		p.result(nil)
	}
	<-pc.sink.pending
}

// fail ends the channel: every message still pending fails with what the
// channel's closing says about it (see closeError).
func (pc *pubChan) fail(why *amqp.Error) {
	pc.mu.Lock()
	pc.dead = true
	left := pc.pending
	pc.pending, pc.byID = map[uint64]*pending{}, map[string][]uint64{}
	pc.mu.Unlock()
	if why == nil {
		pc.sess.mu.Lock()
		err := pc.sess.err
		pc.sess.mu.Unlock()
		if e, ok := err.(*amqp.Error); ok {
			why = e
		}
	}
	for _, p := range left {
		if p.returned != nil { // its basic.return came before the channel closed
			p.result(pc.sink.classified(unroutable(p.returned)))
			<-pc.sink.pending
			continue
		}
		p.result(pc.sink.classified(closeError(why, p, pc.sink.opts.name("Exchange"))))
		<-pc.sink.pending
	}
	close(pc.done)
}

// abort closes the channel after Publish gave up on messages of it, so
// that none of them can be routed after the channel's end: it waits up to
// CloseTimeout for the broker to close it (the broker has then handled
// every publish sent before), and drops the whole connection otherwise.
// It returns when the channel's messages have their results.
func (pc *pubChan) abort(timeout time.Duration) {
	go func() { _ = pc.ch.Close() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-pc.done:
		return
	case <-t.C:
	}
	pc.sess.abort()
	<-pc.done
}

func (p *pending) result(err error) { p.res <- err }

// waitAll waits for the results of ps (nil entries are skipped) into
// errs, until ctx ends; it returns whether every one came.
func waitAll(ctx context.Context, ps []*pending, errs []error, idx []int) bool {
	for j, p := range ps {
		if p == nil {
			continue
		}
		select {
		case err := <-p.res:
			errs[idx[j]] = err
			ps[j] = nil
		case <-ctx.Done():
			return false
		}
	}
	return true
}
