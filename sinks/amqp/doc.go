// Package amqpsink is the outbox sink for RabbitMQ (AMQP 0-9-1, on
// github.com/rabbitmq/amqp091-go). It publishes each entry as one
// persistent message with publisher confirms, over a connection of its own
// that it re-establishes when lost. [Dial] connects; [Sink.Publish] is the
// [github.com/outboxrelay/outbox.Sink] the relay calls. docs/rabbitmq.md
// tells how to set up the broker and the consumers.
//
// # Exchanges and routing
//
// An entry is published to the exchange [Options.Exchange] maps it to (by
// default the exchange named after its Topic) with the routing key
// [Options.RoutingKey] gives (by default its Key) or that
// [Options.RoutingKeyTemplate] builds ("{topic}.{key}"). The message
// carries:
//
//   - message_id: the entry ID, and the same ID in the header
//     [Options.IDHeader] ("outbox-id"), for consumers to deduplicate by;
//   - the entry's headers as string headers (traceparent, outbox-key-seq
//     and any other), an entry header named like the ID header excepted;
//   - delivery_mode 2 (persistent), and timestamp = the entry's CreatedAt;
//   - the payload as the body.
//
// The sink declares nothing: the exchanges, queues and bindings are the
// application's (docs/rabbitmq.md, "Setup").
//
// # Confirms
//
// Every channel is in confirm mode and every publish is mandatory. An
// entry is reported published only when the broker acknowledged its
// message (basic.ack) and did not return it first: RabbitMQ acknowledges a
// persistent message routed to durable queues once the queues have
// written it to disk, and sends the basic.return of an unroutable
// mandatory message before its basic.ack, so a returned message fails
// with [ErrUnroutable] (permanent: the reason names the exchange, the
// routing key and the fixes, a queue bound for that key or an alternate
// exchange). A basic.nack fails the entry with [ErrNacked] (transient).
// When a channel or the connection closes before the confirm, the entry
// fails with [ErrConnectionLost] (transient): the broker may have routed
// it, so its retry may be a duplicate, which consumers drop by message_id.
//
// At most [Options.MaxPending] messages wait for confirms at once across
// the sink's [Options.Channels] channels; Publish waits for room.
//
// # Ordering
//
// [Sink.KeepsKeyOrder] reports true: the relay hands the sink many
// entries of a key in one call. The entries of one Topic and Key always
// publish on the same channel (a hash of both picks it), written one at a
// time in the order of the call; RabbitMQ handles a channel's publishes in
// order, so a queue receives a key's messages in that order, and a
// consumer sees them so while the queue has a single consumer (or single
// active consumer) and nothing is requeued. A failure inside a call cannot
// let a later entry of the key be written after an earlier one that is
// retried: a channel error drops every publish of the channel after the
// one that caused it, and the call publishes nothing more on a new channel
// in its place; a publish that could not be written stops the key's later
// entries in the call; and an entry that failed retryably (a nack)
// while a later entry of its key was confirmed is turned permanent, so
// the relay parks it instead of delivering it out of order (keyorder.go
// argues each case).
//
// Between calls a key's channel may be replaced (after a channel error or
// a reconnection). A publish the sink gave up on is either handled by the
// broker before the channel's close-ok or cut with the connection (see
// Deadlines), so the next call's messages go after it, as long as the
// broker is not stalled past the landing bound.
//
// # Errors
//
// [Classify] decides each error's class (the relay parks permanent errors
// at once and retries the others): no exchange (404 NOT_FOUND), access
// refused (403 ACCESS_REFUSED: no write permission, or an internal
// exchange), a message over the broker's max_message_size (406
// PRECONDITION_FAILED), an unroutable message, and an exchange name,
// routing key, entry ID or header name over AMQP's 255 bytes (checked
// before publishing) are permanent, each with a reason that says what to
// configure. The channel errors are given only
// to the entry they are about; the other entries pending on that channel
// fail with [ErrConnectionLost]. A lost connection, a broker restart (320
// CONNECTION_FORCED, a reset), a nack and a connection blocked by a
// memory or disk alarm past the publish's deadline ([ErrBlocked]) are
// transient; a publish that timed out is semi-transient. While the broker
// blocks the connection (connection.blocked), Publish waits to write
// ([Sink.Blocked] tells).
//
// The sink never logs. No error carries the URL's password.
//
// # Connections
//
// amqp091-go does not reconnect: the sink does. When its connection
// closes, the messages awaiting confirms fail (transient) and the next
// Publish or [Sink.Ping] dials again in the background, waiting no more
// than its context allows, no sooner than [Options.ReconnectDelay] after
// a failed attempt (doubling to [Options.MaxReconnectDelay]). Channels
// closed by a channel error are opened again on the next publish.
//
// # Deadlines
//
// Publish returns by its context's end or [Options.PublishTimeout],
// whichever comes first, plus about CloseTimeout (a write that blocks on a
// full socket, because the broker stopped reading, is ended by dropping
// the connection CloseTimeout after the deadline). When it gives up on
// messages not confirmed, it closes their channel and waits up to
// [Options.CloseTimeout] for the broker's close-ok: the broker handles a
// channel's commands in order, so by then it has routed or dropped every
// publish of the channel, and none can land later. Without a close-ok in
// time, Publish drops the whole connection with a TCP reset (discarding
// what the client had not sent yet). Bytes already on their way can still
// reach the broker while it keeps the connection open: it closes a
// connection it has not heard from for two heartbeat intervals. So a
// message given to Publish can land at most CloseTimeout + 2 x heartbeat
// (+ 1s for the broker to route what it read) after Publish's context
// ended: [Sink.LandingBound], 2s + 2 x 3s + 1s = 9s with the defaults
// ([DefaultHeartbeat] is 3s, which the sink asks for unless the
// amqp.Config or the URL says otherwise). PublishTimeout is not part of
// it: the bound runs from the moment Publish gives up, whatever made it.
// Without heartbeats (neither side asks for one) nothing bounds it and
// LandingBound is [LandingUnbounded]. The bound assumes the broker is not
// stalled (a paused VM, a stopped process) past it with a publish read and
// not yet routed, or still unread in its socket buffer; declare a larger
// [Options.LandingBound] where that can happen.
package amqpsink
