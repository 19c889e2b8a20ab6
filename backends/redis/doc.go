// Package redisoutbox is the Redis backend of the outbox: entries are
// appended inside the caller's MULTI/EXEC (a go-redis TxPipeline) and
// relayed by Lua scripts fenced by per-partition leases. It works with any
// redis.UniversalClient: a single node, Sentinel (failover client) or
// Redis Cluster. The name reads well next to go-redis's redis package.
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	// Creates the outbox with 8 partitions, or opens it if it exists with 8.
//	ob, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: "{orders}", Partitions: 8})
//	...
//	_, err = client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
//		pipe.HSet(ctx, "order:42", "state", "paid")
//		return ob.AppendInTx(ctx, pipe, outbox.Entry{Topic: "orders", Key: "42", Payload: body})
//	})
//
// # Keys
//
// Options.Prefix holds exactly one hash tag, "{outbox}" by default. Each
// partition p gets the tag with ":p" appended, so partitions spread over
// Cluster slots while all keys of one partition share a slot and every
// script is single-slot. For prefix "{outbox}", partition 0 uses:
//
//	{outbox:0}:entries   hash    entry ID -> encoded entry (see below)
//	{outbox:0}:pending   zset    seq8+ID -> next attempt time (ms)
//	{outbox:0}:parked    zset    parked IDs, score 0 (pages by ID)
//	{outbox:0}:parkedat  zset    parked ID -> park time (ms), for PurgeParked
//	{outbox:0}:keyorder  zset    per marked keyed entry: key-len|key|position|seq8|ID, score 0
//	{outbox:0}:lease     string  "version:owner", PX = lease TTL
//	{outbox:0}:leasever  counter last lease version (never expires)
//	{outbox:0}:seq       counter last append sequence (also bumped when a member moves within pending)
//	{outbox:0}:keyseq    hash    entry key -> last per-key sequence number (only with Options.KeySequence)
//	{outbox:0}:history   hash    entry ID -> attempt history and deferred flag (attempted or deferred entries only)
//	{outbox:0}:paused    hash    paused topic -> since (ms); field "" while the partition is paused (see Pauses)
//
// and the outbox as a whole, in the slot of the prefix's own tag:
//
//	{outbox}:meta        hash    partitions, created-at (ms): the stored partition count
//	{outbox}:members     hash    relay owner -> membership record (see Membership)
//	{outbox}:memberinfo  hash    relay owner -> host, version, start, last heartbeat
//	{outbox}:pauses      hash    "t:"+topic, "p:"+partition -> since (ms): what is paused (see Pauses)
//
// keys.go builds every one of these names. Every key a script touches is
// passed in KEYS. Wake-ups are published on one sharded pub/sub channel
// per partition, "{outbox:0}:notify" and so on (see Notifications).
//
// # Partition count
//
// The partition count is stored with the outbox in the meta key. New with
// Options.Partitions 0 reads it (and fails when no outbox exists at the
// prefix); New with a positive count stores it when none is stored (this
// creates the outbox; meta.lua reads and writes in one step, so racing
// constructors agree) and otherwise checks it, failing with
// [outbox.PartitionMismatchError] on a difference. Outboxes created by
// builds before the meta key have none: the first New with the count they
// were created with stores it (docs/redis.md, "Upgrading to the stored
// partition count").
//
// # Notifications
//
// Each append that adds entries to a partition publishes the partition's
// number with SPUBLISH on the partition's channel, inside the same EXEC.
// The channel carries the partition's hash tag, so on Redis Cluster the
// message stays on the partition's shard instead of being broadcast to
// every node as PUBLISH is. [Backend.Notifications] subscribes with
// SSUBSCRIBE: one connection for all partitions on a single node, one per
// partition on Cluster (a subscription names the channels of one slot).
// It sends the partition number, or [outbox.AllPartitions] after go-redis
// resubscribes following a lost connection, or for a payload that is not
// a partition number. Its buffer holds 256 values; more are dropped.
//
// # Membership
//
// [Backend.Heartbeat] and [Backend.Leave] keep one record per relay in the
// members hash: the expiry (ms by the server's TIME), the relay's
// MaxPartitions and the partitions it holds. Heartbeat (heartbeat.lua)
// writes the caller's record, deletes up to 100 expired ones and returns
// the live ones, sorted by owner in Go; Leave (leave.lua) deletes one.
// Each is one round trip on one slot. The relay's Host, Version and
// Started, and its last heartbeat (Renewed), are kept beside the record in
// the memberinfo hash; [Backend.Members] lists them.
//
// # Operators
//
// [Backend.MarkFailed] keeps each entry's last attempts (time, error,
// owner) in its partition's history hash, which the claim never reads; a
// deferral (Failure.Deferred) is not an attempt and marks the entry so it
// holds back its key. [Backend.PauseTopic] and [Backend.PausePartition]
// write a record in the pauses hash and each partition's paused hash, which
// the claim reads once per call. [Backend.Entries] and
// [Backend.BlockedKeys] list by state and by blocked key, scanning the
// pending sets in bounded chunks. docs/redis.md ("Attempt history and
// deferrals", "Pauses", "Listing entries and blocked keys") gives the
// layouts and costs.
//
// # Inspection
//
// Besides [outbox.Inspector] (Stats, Parked, Requeue) and Cancel, a Backend
// is an [outbox.PartitionInspector] and an [outbox.Looker].
// [Backend.PartitionStats] runs one script per partition, pipelined, that
// reads the partition's counts and its lease key; Stats is their sum.
// [Backend.Lookup] cannot tell an entry's partition from its ID, so it
// looks in every partition: P script calls, pipelined (one round trip per
// node); docs/redis.md has the measured cost.
//
// # Corrupt data
//
// A stored value the claim cannot use (it does not decode, or its topic is
// empty) is parked, not returned, and does not stall its partition or
// hold back its key: [Backend.FetchBatch] reports it once
// ([outbox.BatchFetcher]) with the key and topic that could be read and a
// reason naming the field. The value is quarantined (format 3: the
// salvaged key and topic, the reason as LastError, the raw value as
// Payload), so Parked and Lookup show it and Requeue refuses it with an
// [*outbox.RequeueRefusedError]. A key of the outbox of the wrong type
// fails the calls that use it, before any write, with an error naming the
// key, its type and the fix. See docs/redis.md, "Corrupt data and
// wrong-typed keys".
//
// # Ordering
//
// A pending member is the entry's 8-byte big-endian append sequence
// followed by its ID, and its score is the next attempt time in ms. Redis
// orders equal scores by member bytes, so ZRANGEBYSCORE returns entries by
// (due time, append order) exactly, however many share a millisecond.
//
// Per-key order does not depend on scores: a key's order is its pending
// entries by (position, sequence), where the position is the entry's first
// due time. The claim script hands out an entry with a key only when every
// entry before it in its key's order is handed out in the same call and was
// never attempted, so a failing entry holds back the rest of its key until
// it is sent or parked. The keyorder set lists only the keyed entries that
// were attempted or re-scored while held back (the others are found by the
// claim's own scan, since their score is their position), so appends write
// nothing for it and it stays small; see docs/redis.md.
//
// # Leases
//
// AcquireLease is SET NX PX with the owner token, the version comes from
// INCR of a persistent counter; renew and release compare "version:owner"
// first. Every claim and finish script checks the same token, so a stale
// holder changes nothing and gets [outbox.ErrLeaseLost]. The lease is the
// claim: FindPendingBatch writes nothing per entry, the entries it returns
// stay pending until finished, and the next holder of the partition reads
// the unfinished ones first. Times come from the server's TIME: a failed
// entry is due again at the server's time plus [outbox.Failure.Delay],
// never by the relay's clock.
//
// # Tuning
//
// One partition is one slot on one master; use more
// partitions (and relays) to spread load over a Cluster. On Cluster a
// transaction can hold entries of one partition only; see
// [Backend.AppendInTx] and [Backend.HashTag]. Run Redis with
// maxmemory-policy noeviction and, for durability, appendonly yes with
// appendfsync always or everysec; docs/redis.md has the trade-offs and
// measured numbers.
//
// # Retention and health
//
// Every park records its time in the partition's parked-at sorted set;
// [Backend.PurgeParked] (outbox.ParkedPurger) removes entries parked
// before a time as Cancel removes them, partition by partition. There is
// no archive: MarkSent deletes sent entries. [Backend.Health]
// (outbox.HealthChecker) reads INFO memory from the server (every master
// of a Cluster) and warns of fragmentation, of used memory near maxmemory
// and of an evicting maxmemory-policy.
package redisoutbox
