// Package kafkainbox consumes Kafka records published by the outbox
// through an [inbox.Inbox], with franz-go: each record's effects commit
// exactly once, and each partition's position is stored with them.
//
// [NewConsumer] makes a [Consumer] of a consumer group; [Consumer.Run]
// polls, hands every partition's records to [inbox.Inbox.HandleBatch]
// (one transaction per batch) and stores, in the same transaction, the
// partition's next offset. [Message] maps one record to an
// [inbox.Message] for consumers that poll for themselves.
//
// # Offsets with the effects
//
// This is Kafka Connect's exactly-once sink shape: the group's committed
// offsets in Kafka are not the source of truth, the inbox store's are.
// When partitions are assigned (on start, and at every rebalance that
// gives this member partitions) the Consumer replaces the offsets kgo
// fetched from Kafka with the ones in the store ([inbox.Store].Offsets),
// and a partition the store has none for starts at Options.ResetOffset
// (default: its start). It does so in kgo's AdjustFetchOffsetsFn, which
// kgo calls after it fetched the group's commits and before it fetches
// any record of the new partitions, so no record is read from another
// position first. If the store cannot be read, the function's error ends
// the group session and kgo joins again (and asks again) instead of
// consuming from anywhere. OnPartitionsAssigned with SetOffsets was the
// alternative, and is worse: that callback runs before kgo's own offset
// fetch and has no error to return, so a store that fails there leaves
// the partition to start from the Kafka commit.
//
// A consumer that crashes after its transaction committed and before an
// offset commit to Kafka loses nothing and repeats nothing: the next
// owner of the partition starts where the store says. The handled
// offsets are also committed to Kafka, after the fact, for lag monitors
// (Options.DisableKafkaCommit turns that off); they are never read back.
// Even a record read twice (a partition lost, not revoked, and handled by
// two members for a moment) is applied once: the inbox records its ID.
//
// The Consumer reads with read_committed isolation by default: the
// records of a transaction the Kafka sink aborted (its transactional
// mode) are never handed to the inbox.
//
// # Batches and order
//
// Each poll's records are grouped by partition. A partition's records are
// handled in their order, in batches of at most Options.MaxBatch (default
// 500), each batch one transaction; different partitions are handled
// concurrently, each in transactions of its own; the next poll waits for
// all of them, so one slow batch delays the other partitions' next records
// (a failed one does not: it is retried in a later poll). The records of
// one key are in one partition (the Kafka sink's partitioner keys by
// record key), so each key's effects commit in order, and the inbox checks
// the outbox-key-seq numbers (a gap is counted in Stats.Gaps and reported
// by the inbox by its gap policy).
//
// # Rebalances
//
// The Consumer uses kgo's BlockRebalanceOnPoll and, by default, the
// cooperative-sticky balancer: a partition is revoked only between polls,
// once the batches of the poll committed or rolled back, and the next
// owner reads the offset they stored. When a rebalance waits for the poll
// being handled, each partition stops before its next batch (kgo's
// OnPartitionsCallbackBlocked) and is rewound to its first record not
// handled, so that a large poll does not hold the group up. A batch that
// waits under the inbox's GapHold policy holds the rebalance for up to
// inbox.Options.GapHold: keep it below the group's rebalance timeout
// (kgo.RebalanceTimeout, default 60s).
//
// # Failures
//
// A batch whose transaction fails (the handler returns an error, the store
// fails, a record carries no outbox-id or a bad outbox-key-seq, the
// inbox's GapFail policy refuses a gap) is not applied and not skipped:
// its partition is rewound to the batch's first record, paused for
// Options.RetryBackoff (doubling up to Options.MaxRetryBackoff) and tried
// again, with a log line per failed attempt naming the topic, partition,
// offset and error, while the other partitions go on. (A resumed partition
// is fetched once the broker answers the fetch in flight: up to
// kgo.FetchMaxWait, default 5s, when the other partitions are idle.) By
// default it is tried forever: a poison record stops its partition,
// visibly, until the handler is fixed (or the operator moves the stored
// offset past it, in the store, with the consumers stopped). With
// Options.MaxAttempts, Run returns a [*BatchError] once a batch failed
// that many times; the stored offset stays at its first record.
//
// # Stopping
//
// When Run's context is done no new batch starts; the batches in flight
// are let commit for up to Options.StopTimeout (then rolled back), and
// the client leaves the group, handing its partitions over.
// Stopped any other way (a crash), the member's partitions move once the
// group's session timeout expires, and their next owner resumes from the
// store as well.
//
// # Retention
//
// With Options.Retention set, the member of the group that holds
// partition 0 of the first of Options.Topics runs the inbox's janitor
// (inbox.Inbox.RunJanitor): one janitor per group, started when kgo
// assigns that partition, stopped (and waited for) when it is revoked or
// lost and when Run returns.
package kafkainbox
