// Package outbox is a framework for the transactional outbox pattern.
//
// A service writes its business change and an outbox [Entry] in one
// transaction, through a [Backend] (Postgres, Redis, in-memory, or your
// own); a [Relay] later publishes each entry to a [Sink] (Kafka) at least
// once, in per-key order, with retries, backoff, parking of poison entries
// and scheduled delivery.
//
// # Appending
//
// [Backend.AppendInTx] joins the caller's transaction: a pgx.Tx for
// backends/postgres, a go-redis TxPipeline (MULTI/EXEC) for backends/redis.
// The entry is visible to relays if and only if the transaction commits.
// Entries with a caller-supplied ID are idempotent: appending the same ID
// twice stores one entry.
//
// # Ordering
//
// Entries with the same Key are delivered in append order. A failing entry
// holds back the later entries of its key (only its key) until it is sent
// or parked. Entries with an empty Key are unordered. A scheduled entry
// (NotBefore in the future) takes its place in its key's order at the time
// it is scheduled for.
//
// # Partitions and leases
//
// Entries are spread over a fixed number of partitions by key
// ([PartitionOf]). A relay leases a partition before relaying it; every
// fetch and outcome write is fenced by the lease (owner token and version),
// so a relay that lost its lease can never overwrite the work of the one
// that took over. Several relays share an outbox by leasing different
// partitions; a dead relay's partitions come back after the lease TTL.
//
// # Delivery
//
// At least once. Duplicates happen only around a lease loss or a crash
// between publishing and recording the outcome, at most one batch per
// incident. Every published message carries its entry ID; consumers
// deduplicate by it.
//
// # Writing a backend
//
// Implement [Backend] (and any of [Notifier], [Canceler], [Inspector]) and
// run [github.com/outboxrelay/outbox/conformance.Run] against it; see
// docs/backend-authors.md.
package outbox
