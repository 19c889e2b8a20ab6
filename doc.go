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
// Implement [Backend] (backend.go) and run
// [github.com/outboxrelay/outbox/conformance.Run] against it; the guide is
// docs/backend-authors.md, and the helpers every backend shares (the
// argument checks and a few more) are in backend_helpers.go. A [Store] may
// also implement optional interfaces; the relay, the CLI and the dashboard
// detect each with a type assertion and do without it when it is missing:
//
//   - [BatchFetcher]: fetches a batch and parks the entries whose stored
//     data does not decode, reporting those parks.
//   - [Prefetcher]: claims a partition's next batch while the batch before
//     it is still being published.
//   - [Notifier]: tells relays which partitions got entries, so they wake
//     at once instead of at their next poll.
//   - [Membership]: stores the relays' heartbeats, so a fleet shares the
//     partitions evenly.
//   - [Canceler]: cancels an entry that was not delivered yet.
//   - [Inspector]: counts by state, lists and requeues parked entries.
//   - [PartitionInspector]: the counts and the lease holder of every
//     partition.
//   - [Looker]: one entry by ID, whatever its state.
//   - [Lister]: the entries by state (due, scheduled, retrying, parked)
//     and the keys held back by a failing, deferred or paused head entry.
//   - [Pauser]: pauses and resumes delivery by topic or partition for
//     every relay of the fleet.
//   - [MemberLister]: lists the fleet's relays without joining it.
//   - [Exporter]: reads a partition's unsent entries and removes them once
//     moved (the source side of a move).
//   - [Importer]: adds exported entries ahead of the appended ones (the
//     destination side of a move).
//   - [Holder]: holds an outbox's relays back, so nothing is delivered.
//   - [Sealer]: seals an outbox, so every append to it fails.
//
// The first eight are in backend_optional.go, the next three (the
// operator SPI) in backend_operate.go, the last four (the migration SPI,
// see docs/migration.md) in backend_move.go. Every backend keeps each
// entry's last [MaxAttemptHistory] attempts ([Attempt]), written by
// [Store.MarkFailed]. A [Sink] may
// implement two: [LandingBounder] (how long after a cancelled publish a
// message can still land) and [KeyOrderer] (it keeps a key's order within
// one call).
//
// # The relay
//
// The relay is in the relay*.go files: [Relay] and its lifecycle
// (relay.go), [RelayOptions] with its defaults and [RelayOptions.Validate]
// (relay_options.go), the coordinator that shares partitions in a fleet
// (relay_coordinator.go), the partition worker (relay_worker.go), lease
// keeping (relay_lease.go), publish rounds (relay_rounds.go), recording
// their outcomes (relay_outcomes.go), the circuit breakers
// (relay_breaker.go), the pauses of a [Pauser] (relay_pause.go), the
// summaries of store failures in the log (relay_storelog.go) and of
// publish failures (relay_ratelog.go), the samplers behind the outbox and
// archive gauges (relay_sampler.go), retention (relay_retention.go), the
// store health watch (relay_health.go) and the metrics and spans
// (relay_metrics.go).
package outbox
