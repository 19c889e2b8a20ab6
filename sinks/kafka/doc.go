// Package kafkasink is the Kafka [outbox.Sink], built on franz-go's kgo.
//
// [New] wraps a *kgo.Client the caller configured; [Dial] builds one from
// seed brokers with defaults suited to an outbox relay. [Sink.Publish]
// produces every entry of a call concurrently and reports one classified
// error per entry, which the relay turns into a retry or a park.
//
// # Records
//
// Each entry becomes one record: the topic is the entry's Topic (or what
// [Options.Topic] maps it to), the record key is the entry's Key (a nil key
// when Key is empty), the value is the Payload. Headers carry the entry ID
// (header "outbox-id", see [Options.IDHeader]), the entry's own headers
// (which include "traceparent" and "tracestate" when the entry was
// appended inside a traced span) and, if configured, the attempt number.
// Consumers read the ID back with [EntryID] and deduplicate with a
// [Deduper].
//
// # Ordering
//
// kgo's default partitioner hashes a non-nil record key with murmur2 and
// takes it modulo the partition count, exactly like the Java client, so
// all records of one key go to one Kafka partition (as long as the topic's
// partition count does not change). The idempotent producer keeps the
// records of a partition in order across its internal retries, and when a
// batch fails kgo fails every record it holds for the partition. Records
// produced after kgo handled the failure are written under a new producer
// epoch, so Publish produces no further record of a key once one of the
// key's records failed, and reports a retryable failure that a later
// written record of its key overtook anyway as permanent (the relay parks
// it). The sink therefore reports [Sink.KeepsKeyOrder] (except in
// transactional mode), and the relay hands it many entries of a key in one
// call, in order; after a retryable failure of one of them it records none
// of the key's later entries as sent and publishes them again after the
// retry, so no entry is delivered after a later one of its key except by a
// requeue of a parked entry (see docs/kafka.md, "Hot keys"). Records with an
// empty key have a nil Kafka key and are spread over partitions by kgo's
// sticky (uniform bytes) partitioning, with no order among them.
//
// # Errors
//
// Every error Publish returns is marked with a [backoff.Class] by
// [Classify]: retriable Kafka errors are transient, timeouts and
// unreachable brokers semi-transient, and errors no retry can fix (record
// too large, invalid topic name, authorization denied, invalid record)
// permanent, so the relay parks the entry. A record the broker rejects as
// too large is retried once on its own before it is declared permanent,
// so one oversize record never parks the records that shared its Kafka
// batch. A topic the brokers do not know (not created yet, or deleted and
// created again) is transient: the relay retries its entries with backoff,
// holding back the later entries of their keys, and they park only once
// the topic has stayed unknown for [Options.UnknownTopicTimeout] (1m),
// with a reason that names the topic.
//
// # Delivery
//
// At least once. A record is acknowledged only after every in-sync
// replica has it (acks=all, required by the idempotent producer). A record
// may be written twice when an acknowledgement is lost and the relay
// retries the entry, when Publish gave up on a record that is written
// after all (below), or when a relay loses its lease mid-batch: consumers
// deduplicate by entry ID.
//
// # Deadlines
//
// Publish returns by the earlier of its context's deadline (or
// cancellation) and [Options.PublishTimeout], promptly (a few milliseconds
// in the tests): it does not wait for kgo. The records not acknowledged by
// then fail (with the context's error when the caller's context ended,
// else semi-transient), and their fate is unknown: a produce request
// already sent cannot be recalled, and a broker appends a request it has
// read even if the client has gone. [Sink.LandingBound] says how long
// after Publish returns such a record can still land: with [Dial]'s
// defaults 10s, computed from the client's options (kgo stops sending a
// record once its Publish returned, because Dial sets
// kgo.AllowIdempotentProduceCancellation), assuming a broker appends a
// request within the time kgo waits for its answer; unbounded with kgo's
// defaults (a client given to [New]), whose idempotent producer re-sends
// such a record until a broker answers; 0 in transactional mode, for
// read_committed consumers. A relay that stops publishing under a lease
// that long before the lease can pass to another relay keeps a stale
// record from landing after the next holder's record of the same key;
// docs/kafka.md, "Lease boundary and stale records", says exactly when
// one still can.
//
// # Transactions
//
// With [Options.TransactionalIDPrefix] set (only with [Dial]), each
// Publish call is one Kafka transaction of a producer whose transactional
// ID is derived from the outbox partition, so a relay that takes over a
// partition fences the previous holder at the broker: a stale relay's
// records are aborted and read_committed consumers never see them, even
// when the broker handles the stale relay's request after the new
// holder's records. It is the choice for compacted topics, where a stale
// value landing last would win. See docs/kafka.md for what this does and
// does not guarantee.
package kafkasink
