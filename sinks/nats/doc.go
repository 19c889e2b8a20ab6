// Package natssink is the NATS JetStream [outbox.Sink], built on nats.go's
// jetstream package.
//
// [New] wraps a *nats.Conn the caller made; [Dial] makes one with defaults
// suited to an outbox relay. [Sink.Publish] publishes the entries of a call
// asynchronously (jetstream's PublishMsgAsync), waits for each
// acknowledgement (PubAckFuture), and reports one classified error per
// entry, which the relay turns into a retry or a park. docs/nats.md says
// how to set up the stream and what the consumer should do.
//
// # Subjects
//
// Each entry becomes one message on the subject [Options.Subject] maps it
// to (default: the entry's Topic), which a JetStream stream must capture.
// The payload is the message body. Headers carry the entry ID twice (the
// JetStream header Nats-Msg-Id, and "outbox-id", see [Options.IDHeader]),
// the entry's Key ("outbox-key", see [Options.KeyHeader]; NATS messages
// have no key of their own) and the entry's own headers, which include
// "traceparent" and "tracestate" when the entry was appended inside a
// traced span and "outbox-key-seq" when the backend numbers the entries
// of a key. An entry whose subject is empty or not a literal subject
// (whitespace, an empty token, a wildcard token), or with a header NATS
// cannot carry (a name with ':', a space or a line break, a value with a
// line break), fails permanently, with a reason that says what to change.
//
// # Ordering
//
// Publish publishes no entry of a key before the previous entry of that
// key in the call is acknowledged by the stream, or has failed
// permanently; entries of different keys, and entries without a key, are
// published concurrently, up to [Options.MaxPending] unacknowledged
// messages at a time over all calls. When an entry fails with a retryable
// error, the later entries of its key in the call fail (transient) without
// being published. So a key's messages reach the stream in append order,
// whatever the server does with each publish, and [Sink.KeepsKeyOrder]
// reports true: the relay hands the sink many entries of a key per call,
// and retries a failed entry before any later one of its key. A stream
// stores messages in the order it receives them, and a consumer (an
// ordered consumer, or a pull consumer processing one message at a time)
// reads a key's messages in that order. Order holds per key across
// subjects too, but a consumer reading two streams sees no order between
// them. A hot key is published at one round trip per entry.
//
// # Deduplication
//
// Nats-Msg-Id is the entry ID, so a stream drops a message whose ID it has
// stored within its duplicate window (StreamConfig.Duplicates, default
// 2m), and acknowledges it as a duplicate; the sink reports that entry
// published. A relay publishes an entry again when it cannot know whether
// an earlier publish was stored: a timed-out acknowledgement, a connection
// lost with messages in flight, a relay that crashed before it recorded
// the entry as sent (another relay takes the partition over after its
// lease runs out). Each such re-publish comes, after the copy the stream
// may have stored, within the retry delay of the relay's backoff (at most
// Backoff.Max, 5m by default) or within LeaseTTL + AcquireInterval (40s by
// default) for a crash, plus [Sink.LandingBound]. With a Duplicates window
// at least that long (6m for the defaults), the stream holds every entry
// once: the restart test kills nats-server twice during a drain of 20,000
// entries and finds none twice. A copy outside the window is stored twice:
// a requeued parked entry, an entry deferred longer behind an open
// breaker, a stream recreated. Consumers still deduplicate by Nats-Msg-Id
// (or outbox-id) for those, and for their own redeliveries.
//
// # Errors
//
// Every error Publish returns is marked with a [backoff.Class] by
// [Options.Classify] (default [Classify]). Permanent (the relay parks the
// entry, with a reason that names what to configure): no stream captures
// the subject ([ErrNoStream]: the server answered "no responders" and the
// JetStream API confirms no stream's subjects include it; the reason names
// the subject, the topic and the mapping option), a message over the
// stream's MaxMsgSize, its headers over 64KiB, a stream full with
// DiscardNew (MaxMsgs, MaxBytes, MaxMsgsPerSubject; the reason names the
// stream and the limit), a message over the server's max_payload, an
// invalid subject or header. Retryable: a connection lost or reconnecting
// (a server restart), "no responders" from a subject whose stream exists
// or cannot be looked up (a leader election, JetStream restarting),
// JetStream temporarily unavailable (transient); an acknowledgement that
// did not come within PublishTimeout, a closed connection (semi-transient).
//
// # Deadlines
//
// Publish returns by the earlier of its context's end and
// [Options.PublishTimeout] (5s), and fails what was not acknowledged by
// then. It cannot recall what it published: [Sink.LandingBound] says how
// long after Publish returns such a message can still be stored. The
// reasoning, from where a published message can be:
//
//   - in nats.go's write buffer: the connection's flusher writes it to the
//     socket at once; a write that blocks (a server that stopped reading)
//     fails after the connection's FlusherTimeout (Dial: 5s; nats.go: 1m)
//     and closes the connection, and nats.go drops what it had not
//     written: a new connection starts with an empty buffer;
//   - published while the connection is down: nats.go keeps such messages
//     (up to ReconnectBufSize, 8MB by default) and sends them once it has
//     reconnected, however long that takes (Dial reconnects for ever).
//     Dial sets ReconnectBufSize(-1): such a publish fails at once
//     (transient), and nothing is sent later. A connection that buffers
//     (New with nats.go's defaults) makes the bound [LandingUnbounded];
//   - re-sent by nats.go: jetstream retries a publish answered with "no
//     responders" after 250ms, twice by default, out of the caller's
//     sight; the sink turns that off (WithRetryAttempts(0)) and finds out
//     itself whether the subject has a stream;
//   - on the wire, or read by the server: no client setting bounds this.
//     The bound assumes the server stores what it read within
//     PublishTimeout, the time the sink waits for its acknowledgement; a
//     network or a server that holds a message longer (a partition that
//     heals, a server paused) can store it later.
//
// Hence FlusherTimeout + PublishTimeout: 10s with Dial's defaults, which
// fits the relay's default LeaseTTL (30s) less its RenewMargin (10s).
// [Options.LandingBound] declares another. A message stored later than the
// bound is harmless when its entry was stored within the Duplicates
// window before it (the stream drops it); it is a duplicate after a later
// entry of its key only when it lands more than the window after its
// entry's first copy.
package natssink
