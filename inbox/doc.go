// Package inbox is the consuming half of the outbox: it applies each
// consumed message's effects exactly once, in the consumer's own database
// transaction, and checks each key's order.
//
// The outbox delivers every entry at least once: a relay that crashes
// republishes up to a batch, a lost acknowledgement republishes an entry,
// and a broker redelivers what a consumer did not acknowledge. The inbox
// turns that into one effect per entry: [Inbox.HandleBatch] records the
// entries' IDs in the same transaction as the handler's effects, and skips
// (as [Duplicate]) a message whose ID a committed transaction recorded.
//
// # The guarantee
//
// For every message handed to the inbox with the same ID, the handler's
// effects commit at most once, and exactly once if the consumer keeps
// handing the message until a Handle returns nil (that is, it
// acknowledges the message to the broker only after Handle returned nil),
// provided that:
//
//   - the handler writes its effects only through the transaction it is
//     given (a side effect outside it, such as an HTTP call, is not
//     covered, and may run again when a transaction is retried);
//   - the record of the ID is still kept: the janitor removes records
//     older than JanitorOptions.Retention, after which a redelivery is
//     applied again;
//   - the IDs are the outbox entries' IDs, the same for every delivery of
//     an entry (the sinks set them: the "outbox-id" header, Nats-Msg-Id,
//     the AMQP message_id).
//
// # Order per key
//
// With per-key sequence numbers on the producing side (header
// outbox-key-seq, see outbox.HeaderKeySeq), the inbox also keeps each
// key's highest applied number in the same transaction and reports a
// message that skips numbers (a [Gap]: metric MetricGaps, a log line with
// the key and the missing range), then handles it by [GapPolicy]: apply
// anyway (the default), hold it for a bounded time waiting for the
// missing numbers, or fail.
//
// # Offsets with the effects
//
// A message may carry the position after it in its source partition
// ([Message].Offset); the inbox stores it in the same transaction, and a
// consumer that resumes from the stored offsets (as the Kafka helper does)
// neither loses nor repeats an effect when it crashes between its commit
// and an offset commit to the broker.
//
// # Stores
//
// [Store] is the small SPI an inbox store implements; [Memory] is the
// in-memory one. Two optional interfaces save round trips, which are most
// of an inbox's cost per message: [KeyRecorder] records the IDs and reads
// the key numbers at once, [Finisher] writes the key numbers and offsets
// at once; with both, a numbered message with an offset costs the store
// two round trips besides the handler's, one without either costs one. The production stores live with the outbox backends:
// PostgreSQL (pgx.Tx and *sql.Tx), MySQL/MariaDB (*sql.Tx), Redis (a
// MULTI/EXEC guarded by WATCH). Package inboxtest is their conformance
// suite.
//
// # Retention
//
// Records grow with every message. [RunJanitor] removes records older
// than a horizon in bounded batches, each in a transaction of its own,
// never in a handler's, pausing between batches at least as long as the
// last one took. The consumer helpers (kafkainbox, natsinbox, amqpinbox)
// run it themselves when their Retention option is set, through
// [Inbox.RunJanitor]. A store that implements [OldestReporter] also gets
// the age of its oldest record exported (MetricOldestAge).
package inbox
