// Package natsinbox consumes a NATS JetStream stream through an inbox
// (package inbox): each message's effects are applied exactly once, in the
// consumer's own transaction, and the message is acknowledged only after
// that transaction committed.
//
// [NewConsumer] wraps a pull consumer (jetstream.Consumer, AckPolicy
// AckExplicitPolicy) and [Consumer.Run] pulls its messages, hands them in
// batches of up to [Options.MaxBatch] to inbox.Inbox.HandleBatch (the
// handler gets the message as m.Data.(jetstream.Msg)) and acknowledges
// them. [Message] is the mapping from a message to an inbox.Message, for a
// consumer loop of one's own.
//
// # Headers
//
// natssink publishes each outbox entry with its ID in "outbox-id" and in
// Nats-Msg-Id, its Key in "outbox-key" and, when the backend numbers keys,
// its per-key sequence number in "outbox-key-seq". The inbox deduplicates
// by the ID ("outbox-id", else Nats-Msg-Id) and checks each key's order by
// the sequence number. [Options.IDHeader] and [Options.KeyHeader] follow
// the sink's options of the same names.
//
// # Acknowledgements
//
// A message is acknowledged (Ack) only after the transaction that applied
// it, or found it a duplicate, committed; duplicates are acknowledged
// too. If the consumer dies or the Ack is lost after the commit,
// JetStream redelivers the message after the consumer's AckWait, and the
// inbox skips it as a Duplicate: the effect stays applied once. A message
// whose transaction did not commit is never acknowledged. Ack is not
// confirmed by the server (DoubleAck would cost a round trip per message):
// a lost one is that same redelivery.
//
// # Errors
//
// When a batch's transaction fails (the handler returned an error, a
// store error the inbox does not retry, a gap under GapFail), nothing of
// it was applied. Run tries it again in place, holding its messages, up
// to [Options.Attempts] (3) times in all, [Options.NakDelay] (1s) apart,
// telling JetStream before each attempt that it is still working on them
// (InProgress, which restarts their AckWait): a short outage of the
// database costs a pause and keeps every order. When the last attempt
// fails, each message of the batch is Nak'd with NakDelay: JetStream
// redelivers them after that delay, and Run goes on with the next
// messages. A message that always fails comes back until the consumer's
// MaxDeliver (unlimited by default): set MaxDeliver (or BackOff) on the
// consumer to bound it; JetStream then stops delivering the message and
// publishes the advisory
// $JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>, on which
// a dead-letter process can fetch it from the stream by its sequence.
//
// A message without an ID cannot be deduplicated, nor one whose
// outbox-key-seq is not a sequence number ordered: Run terminates it (Term:
// JetStream does not redeliver it and publishes the advisory
// $JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.<stream>.<consumer>) and
// logs it, with the reason, at Error level. (It does not use
// TermWithReason: a server before 2.10 ignores "+TERM <reason>" and
// redelivers the message after AckWait.)
//
// Run returns an error when pulling fails (the connection closed, the
// consumer deleted) or an Ack or Nak cannot be sent; the caller calls Run
// again, on a new connection if needed. It returns nil when its context
// ends, after Nak'ing (without a delay) the messages it had pulled and not
// handled.
//
// # Order
//
// A pull consumer delivers a stream's messages in stream order, and
// natssink stores a key's messages in append order, so one Run applies a
// key's messages in order while nothing is redelivered; a batch retried
// in place keeps it. A redelivered message (Nak'd after the last attempt,
// or past its AckWait) comes after the messages delivered meanwhile: with
// MaxAckPending above 1, the key's later messages can be applied before
// it (the inbox reports the skipped numbers as a gap, and the redelivered
// one as Late; see inbox.GapPolicy). Where a key's order must hold
// through longer failures, give the consumer MaxAckPending 1 (one message
// in flight: a Nak'd message is redelivered before any later one).
//
// A consumer that dies (its connection closed) may not take its pull
// requests with it: the server (2.9.10 here) goes on sending them
// messages until they expire (nats.go's PullExpiry, 30s), and those
// messages, with the ones
// the consumer had pulled and not acknowledged, come back after AckWait,
// behind the messages another consumer got meanwhile. So a key's order
// does not hold across a consumer's death (the inbox reports the gaps
// and the late messages, and applies each message once):
// TestWithPostgresEachEntryOnceThroughALostConnection sees 70 to 80
// redeliveries of 200 messages, and every key reordered, after one
// connection closed. Several Runs on one consumer share its messages and
// apply a key's messages concurrently: order then needs one Run per
// consumer.
//
// # Retention
//
// With Options.Retention set, every Consumer runs the inbox's janitor
// (inbox.Inbox.RunJanitor) while its Run runs: JetStream gives a consumer
// no ownership to elect one janitor by, and concurrent janitors do no
// harm (the stores' Purge skips rows another transaction holds).
package natsinbox
