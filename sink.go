package outbox

import (
	"context"
	"sync"
	"time"
)

// Sink publishes entries to a message broker. The relay calls it; the Kafka
// sink ([github.com/outboxrelay/outbox/sinks/kafka]) is the production one.
type Sink interface {
	// Publish publishes msgs and returns one error per message, in the
	// same order: nil means the broker acknowledged the message. It may
	// publish the messages concurrently. The relay never passes two
	// messages with the same non-empty Key in one call, so a sink need not
	// order messages among themselves, unless the sink implements
	// [KeyOrderer] and reports true: then it gets a key's messages many
	// per call, in order, and must keep that order. It should not return before every
	// message is acknowledged or has failed; a sink that must give up on a
	// message whose fate it cannot know (sent to a broker that never
	// answered) reports it failed, and it may still be written: a
	// duplicate, which consumers drop by entry ID. Errors are classified with
	// [github.com/outboxrelay/outbox/backoff.ClassOf]: mark an error with
	// backoff.Permanent to have the entry parked at once.
	//
	// Publish must be safe for concurrent use (the relay publishes
	// partitions in parallel) and must not retain msgs. A cancelled ctx
	// should fail the messages not yet acknowledged.
	Publish(ctx context.Context, msgs []Entry) []error
}

// SinkFunc adapts a function that publishes one message to a [Sink]. Its
// Publish calls the function for every message concurrently and waits for
// all of them.
type SinkFunc func(ctx context.Context, msg Entry) error

// Publish implements [Sink].
func (f SinkFunc) Publish(ctx context.Context, msgs []Entry) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 1 {
		errs[0] = f(ctx, msgs[0])
		return errs
	}
	var wg sync.WaitGroup
	for i := range msgs {
		wg.Go(func() { errs[i] = f(ctx, msgs[i]) })
	}
	wg.Wait()
	return errs
}

// ChannelSink is a [Sink] that sends every message to a channel, for tests,
// examples and in-process consumers. Publish blocks until the channel takes
// each message or ctx is done (then the remaining messages fail with the
// context's error).
type ChannelSink chan<- Entry

// Publish implements [Sink].
func (c ChannelSink) Publish(ctx context.Context, msgs []Entry) []error {
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		select {
		case c <- m.Clone():
		case <-ctx.Done():
			errs[i] = ctx.Err()
		}
	}
	return errs
}

// LandingBounder is an optional interface of a [Sink] whose messages can
// still be written by the broker after Publish gave up on them: a request
// already in flight cannot be recalled. The relay stops trusting a lease
// LandingBound before its deadline (it cancels the round's publish then,
// unless it renewed the lease), so that whatever a relay published under
// a lease is written, or failed for good, before the lease can pass to
// another relay. See docs/design.md, "The lease boundary".
type LandingBounder interface {
	// LandingBound is how long after Publish's context is cancelled (or
	// its deadline passes) a message given to that Publish can still be
	// written. Zero means never: by then every message is written or
	// failed for good. Negative means it cannot be bounded: the relay
	// warns once and trusts its lease to its local deadline.
	LandingBound() time.Duration
}

// KeyOrderer is an optional interface of a [Sink] that keeps the order of
// the messages of one key and topic within one Publish call. When
// KeepsKeyOrder reports true, the relay puts consecutive entries of a key
// that share a topic in one Publish call, in order (up to
// [RelayOptions.MaxInFlight] messages a call), instead of one entry per
// key per call; a hot key then drains at the sink's batch speed rather
// than at one round trip per entry.
//
// A sink that reports true promises, for the messages of one call that
// share a non-empty Key and a Topic: it writes them in slice order, and it
// writes none of them after an earlier one of them failed with an error
// that is not permanent (such later messages fail too, or are not
// written). A message after one that failed permanently may be written
// (the relay parks the failed one, and a park lets its key go on).
//
// Whatever the sink reports for the later messages of a key after one of
// them failed with a retryable error, the relay records none of them as
// sent: it gives them back to the store unchanged (no attempt is
// counted), where the failed entry holds them back until its retry, and
// they are published again after it. See docs/design.md, "Ordering".
type KeyOrderer interface {
	// KeepsKeyOrder reports whether Publish keeps the order described
	// above. The relay asks once, in NewRelay.
	KeepsKeyOrder() bool
}
