// Package amqpinbox consumes a RabbitMQ queue through an inbox (package
// inbox): each message's effects are applied exactly once, in the
// consumer's own transaction, and the delivery is acknowledged only after
// that transaction committed.
//
// [NewConsumer] takes a channel of its own and a queue; [Consumer.Run]
// consumes with manual acknowledgements and a prefetch of
// [Options.Prefetch], hands the deliveries in batches of up to
// [Options.MaxBatch] to inbox.Inbox.HandleBatch (the handler gets the
// delivery as m.Data.(amqp.Delivery)) and acknowledges them. [Message] is
// the mapping from a delivery to an inbox.Message, for a consumer loop of
// one's own.
//
// # Properties
//
// amqpsink publishes each outbox entry with message_id = the entry ID
// (and the same ID in the header "outbox-id"), the routing key = the
// entry's Key by default, and, when the backend numbers keys, the per-key
// sequence number in the header "outbox-key-seq". The inbox deduplicates
// by the ID and checks each key's order by the sequence number, with the
// key [Options.Key] reads (the routing key by default).
//
// # Acknowledgements
//
// A batch is acknowledged with one basic.ack of its last delivery tag
// with multiple=true, after the transaction that applied it, or found its
// messages duplicates, committed; duplicates are acknowledged too. The
// channel is the Consumer's alone (multiple=true acknowledges every
// earlier delivery of the channel), and every earlier delivery is already
// acknowledged or returned when a batch is, so the ack covers exactly the
// batch. basic.ack has no reply: if the channel or connection closes
// after the commit and before the broker read the ack, the broker returns
// the deliveries to the queue and redelivers them (redelivered=true), and
// the inbox skips them as duplicates: the effect stays applied once. A
// delivery whose transaction did not commit is never acknowledged.
//
// # Errors
//
// When a batch's transaction fails (the handler returned an error, a
// store error the inbox does not retry, a gap under GapFail), nothing of
// it was applied. Run tries it again in place, holding its deliveries,
// up to [Options.Attempts] (3) times in all, [Options.RetryDelay] (1s)
// apart: a short outage of the database costs a pause and keeps every
// order. When the last attempt fails, Run cancels its consumer
// (basic.cancel, so nothing more is delivered), returns every
// unacknowledged delivery of the channel to the queue (basic.nack with
// delivery tag 0, multiple and requeue: the failed batch and what was
// prefetched behind it), drops the deliveries still buffered, waits
// RetryDelay and consumes again.
//
// Where the returned messages go depends on the queue. A classic queue
// puts each back at its place, so the failed batch is delivered again
// before the messages behind it, and a key's order holds. A quorum queue
// of RabbitMQ 3.x (3.10.8 here) puts them behind the messages still in
// the queue, so a key's later messages can be applied before them (the
// inbox reports the skipped numbers as a gap and the returned message as
// Late, and applies both under the default GapApply): on such a queue,
// give Attempts room for the failures you expect to outlast.
// TestHandlerErrorRequeuesAndKeepsKeyOrder checks both: each message
// applied once on both queues, each key in order on the classic queue,
// and on the quorum queue with attempts in place.
//
// A message that always fails is returned and redelivered for ever, and
// holds back the queue behind it. To dead-letter it instead, use a
// quorum queue with a delivery limit (x-delivery-limit) and a
// dead-letter exchange (x-dead-letter-exchange): when the message has
// been returned more often than the limit the broker moves it to the
// dead-letter exchange itself (with x-delivery-limit 2 it is tried 3
// times, Attempts 1: TestMessageThatAlwaysFailsIsDeadLetteredAtTheDeliveryLimit).
// The messages returned with the failed one (prefetched behind it) are
// delivered again too, and count against the limit: set it above the
// failures in a row you expect, or Prefetch to MaxBatch.
//
// A delivery without an ID cannot be deduplicated, nor one whose
// outbox-key-seq is not a sequence number ordered: Run rejects it
// (basic.nack without requeue: dead-lettered if the queue has a
// dead-letter exchange, dropped otherwise) and logs it at Error level.
//
// # Connections
//
// amqp091-go does not reconnect, and neither does Run: when the channel
// or the connection closes, Run returns an error saying so; when the
// broker cancels the consumer (the queue deleted) it returns an error
// wrapping [ErrCancelled]. The caller opens a new connection and channel,
// makes a new Consumer and calls Run again; the broker returned the
// unacknowledged deliveries to the queue when the old channel closed, and
// those whose transaction committed are skipped as duplicates. Run
// returns nil when its context ends, after returning its unacknowledged
// deliveries to the queue for another consumer.
//
// # Order
//
// A queue delivers its messages in order to one consumer, and amqpsink
// publishes a key's messages in append order, so one Run applies a key's
// messages in order. Several consumers on a queue share its messages and
// apply a key's messages concurrently: use a single active consumer
// (x-single-active-consumer) or one queue per key range, as
// docs/rabbitmq.md says.
//
// # Retention
//
// With Options.Retention set, every Consumer runs the inbox's janitor
// (inbox.Inbox.RunJanitor) while its Run runs: a queue gives a consumer
// no ownership to elect one janitor by, and concurrent janitors do no
// harm (the stores' Purge skips rows another transaction holds).
package amqpinbox
