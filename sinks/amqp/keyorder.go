package amqpsink

import (
	"fmt"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
)

// parkOvertaken makes permanent each retryable failure of a keyed entry
// that a later entry of its key (and topic) in the same call overtook:
// the later one was confirmed, so the failed one can no longer be
// delivered before it, and a retry would break the key's order.
//
// Why the sink keeps the [outbox.KeyOrderer] contract: the entries of one
// Topic and Key go to one slot (slotOf hashes them), which writes them on
// one AMQP channel, one at a time, in slice order. RabbitMQ handles a
// channel's publishes in the order it reads them and routes each to its
// queues before the next, so a queue receives a key's messages in the
// order they were published. Within a call, a failure can leave a later
// entry of the key written only in these ways:
//
//   - the channel or connection closed: every message published on it
//     after the first one the broker did not handle was never routed
//     (the broker drops a channel's later frames once it closes it), and
//     the later entries fail with [ErrConnectionLost] too: the call does
//     not publish them on a new channel (slot.publish refuses to replace
//     the channel the call started on); an earlier
//     message routed but not confirmed also fails, retryably, and may be
//     delivered again later: a duplicate, which consumers drop by
//     message_id, not a reordering of first deliveries. Such messages
//     were written before the failure (the channel's end), in order, and
//     nothing of the key is written on that channel after it, which is
//     what the contract asks (TestKeyOrderAcrossChannelFailure checks
//     both);
//   - a basic.nack of one message followed by an ack of a later one (a
//     queue with x-overflow reject-publish that had room again), or a
//     basic.return (unroutable, permanent: allowed by the contract):
//     parkOvertaken turns the nacked entry's failure permanent, so the
//     relay parks it instead of delivering it after the later one;
//   - a publish that failed before it was written (no room, connection
//     blocked past the deadline): publishOn publishes no later entry of
//     the key in the call.
//
// Across calls a key's next call starts after the relay saw the previous
// one end, and its channel was closed (or its messages confirmed) by
// then; see the package documentation, "Ordering", for the case of a
// broker that stalls past CloseTimeout.
func (s *Sink) parkOvertaken(msgs []outbox.Entry, errs []error) {
	var failed map[[2]string][]int // retryable failures not yet overtaken
	for i := range msgs {
		e := &msgs[i]
		if e.Key == "" {
			continue
		}
		tk := [2]string{e.Topic, e.Key}
		switch {
		case errs[i] == nil:
			for _, f := range failed[tk] {
				errs[f] = backoff.Permanent(fmt.Errorf("amqpsink: a later entry of its key (%s, at position %d of this publish call) was confirmed by the broker, so delivering this one now would break key %q's order; parked (requeue it if the order does not matter: it is then delivered after that entry): %w",
					e.ID, i, e.Key, errs[f]))
			}
			delete(failed, tk)
		case backoff.ClassOf(errs[i]) != backoff.ClassPermanent:
			if failed == nil {
				failed = map[[2]string][]int{}
			}
			failed[tk] = append(failed[tk], i)
		}
	}
}
