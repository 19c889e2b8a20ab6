// Package inboxconsumer is the chaos harness's consumer process
// (`chaos inbox-consumer`): it reads the scenario's Kafka topic in a
// consumer group and, for each record, writes one effect row in its own
// PostgreSQL schema, either through the inbox (exactly once: the effect,
// the entry's ID, its key's sequence number and the partition's next
// offset in one transaction; offsets resumed from the database) or
// plainly (the negative control: a transaction per record, offsets
// committed to Kafka afterwards, so at least once).
//
// # Tables
//
// [Setup] creates, in the consumers' schema, the effect table "effects"
// (n bigserial, entry_id, key, seq, pid, at) and, with pginbox.Migrate,
// the inbox's tables "inbox", "inbox_keyseq", "inbox_offsets" and
// "inbox_migrations". [ReadEffects] reads the effects back in insertion
// order for package exactlyonce's check.
//
// # Modes
//
// Inbox mode is the library as a user would run it: kafkainbox.Consumer
// over a pginbox.Store, the handler inserting the effect row in the
// inbox's transaction. Plain mode is a kgo group consumer of its own
// (the negative control).
//
// # Faults
//
// The harness SIGKILLs consumers mid-stream and starts them again with
// the same -instance (static group membership, so the new process takes
// its predecessor's partitions at once), and terminates their PostgreSQL
// sessions (they run as application_name -store sets). A transaction that
// fails, even at COMMIT with an unknown outcome, is run again until it
// commits: the inbox makes the repeat a no-op, the plain mode does not.
package inboxconsumer
