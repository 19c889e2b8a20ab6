// Package memory is the in-memory reference implementation of the outbox
// storage SPI ([outbox.Backend]). It keeps everything in the process's
// memory, so it is NOT durable: entries are lost when the process exits. It
// exists for tests, runnable examples and the demo, and as the first
// backend the conformance suite
// ([github.com/outboxrelay/outbox/conformance.Run]) is proven on. Production
// services use backends/postgres or backends/redis.
//
// It implements [outbox.Backend] over its own transaction type [*Tx], and
// the optional interfaces [outbox.Notifier], [outbox.Canceler],
// [outbox.Inspector], [outbox.Membership], [outbox.PartitionInspector],
// [outbox.Looker], the operators' [outbox.Lister], [outbox.Pauser] and
// [outbox.MemberLister], and those of moving an outbox: [outbox.Exporter],
// [outbox.Importer], [outbox.Holder] and [outbox.Sealer], and
// [outbox.ParkedPurger] (it keeps no archive, so it is not an
// [outbox.ArchiveJanitor]). Every method is safe for concurrent use; one mutex
// guards the whole state, so every call is atomic.
//
// # Transactions
//
// [Backend.Begin] starts a [Tx]. [Backend.AppendInTx] validates the entries
// at once ([outbox.PrepareEntries]), copies them (payload and headers
// included, so the caller may reuse its buffers) and buffers them in the
// Tx. [Tx.Commit] makes all of them visible at one instant;
// [Tx.Rollback] drops them. [Backend.Append] is a standalone append in a
// transaction of its own.
//
// At commit each buffered entry whose ID already exists (pending, claimed
// or parked, or earlier in the same Tx) is skipped: the first append wins.
// Sent entries are removed (see below), so after an entry was sent its ID
// may be appended again and makes a new entry. The others get their
// CreatedAt (the clock's time at commit) and an append sequence number in
// commit order.
//
// # Ordering
//
// Each partition keeps its pending entries in a min-heap ordered by next
// attempt time, ties broken by append sequence. An entry's first next
// attempt time is the later of its NotBefore and its CreatedAt; a failure
// makes it due the failure's Delay after the backend's clock, keeping its
// append sequence;
// Requeue makes it due now with a new append sequence, as if appended now.
// [Backend.FindPendingBatch] pops due entries in that order and claims the
// first limit eligible ones. An entry with a key is held back while an
// entry of the same key appended earlier is failing (Attempts > 0 or
// deferred by [outbox.Failure.Deferred], not sent, not parked) or of a
// paused topic; held-back entries, and the entries of paused topics, are
// set aside per key, so they cost nothing on later fetches, and go back to
// the heap when what held them is sent, parked or cancelled, or the topic
// resumed. A fetch therefore costs O((batch + newly
// held back) × log n), never a scan of the whole outbox.
//
// # Leases
//
// Each partition has at most one lease and a version counter that only
// grows (releasing keeps it). A lease is live while the clock
// ([Options.Now]) is before its expiry. A fenced call (FindPendingBatch,
// MarkSent, MarkFailed, Release) whose lease is not the live one at that
// owner and version fails with [outbox.ErrLeaseLost] and changes nothing.
// Claimed entries stay with their lease; when a new version is granted on
// the partition, or the lease is released, every unfinished claim goes back
// to pending with its original next attempt time and order.
//
// # Outcomes
//
// MarkSent deletes entries (no archive), whatever their state (claimed,
// pending or parked): IDs unknown, already sent or of another partition
// are ignored. MarkFailed applies to entries of the
// lease's partition that are not parked (a parked entry is terminal until
// requeued); others are ignored. LastError is stored in full. Cancel
// removes pending (including claimed and held-back) and parked entries.
// A parked entry records when it was parked (the clock at the MarkFailed
// that parked it, or at the Import that stored it parked);
// [Backend.PurgeParked] removes parked entries by that time, as Cancel
// does.
//
// # Notifications
//
// [Backend.Notifications] channels receive, without blocking, the
// partitions of every commit that added at least one entry (one value per
// partition, in first-append order). Each has a buffer of 256 values;
// values past it are dropped, and the relay's polling finds those entries.
// Requeue does not notify.
//
// # Moving
//
// [Backend.ExportBatch] returns a partition's entries, parked ones
// included, by append sequence; [Backend.RemoveExported] deletes them
// (fenced, like MarkSent). [Backend.Import] numbers imported entries from
// far below the first append sequence (math.MinInt64 up), in the order
// imported, so in each key's order they come before every appended entry,
// whenever it was appended; an imported entry with Attempts > 0 that is
// not parked is failing and holds back the later entries of its key; a
// due imported entry is made due no later than [outbox.HoldState].Since (the
// clock's now when not held). A held backend ([Backend.Hold]) returns
// nothing from FindPendingBatch, after checking its arguments and lease.
// A sealed backend ([Backend.Seal]) refuses entries at AppendInTx and at
// [Tx.Commit], under the lock Seal takes, with an error wrapping
// [outbox.ErrSealed]. Hold and seal live as long as the Backend.
//
// # Operators
//
// [Backend.MarkFailed] keeps each entry's last [outbox.MaxAttemptHistory]
// attempts (the clock's time, the error in full, the lease owner); a
// deferral is not an attempt. [Backend.Entries] and [Backend.BlockedKeys]
// read every stored entry under the lock, so each page is consistent and
// costs O(n log n) in the entries. [Backend.PauseTopic] and
// [Backend.PausePartition] are kept in the Backend, for every relay that
// shares it; pausing a topic costs O(n) in its pending entries, resuming
// it O(n) in the entries set aside.
//
// # Membership
//
// [Backend.Heartbeat] and [Backend.Leave] keep the relay fleet's records
// in memory, judged by the backend's clock, so relays sharing one Backend
// balance their partitions as they would on Postgres or Redis;
// [Backend.Members] lists them. Host and Version are cut to 255 bytes. The
// partition count is fixed at [New]: there is nothing to store it in
// across instances.
package memory
