// Package redisinbox is the Redis store of the inbox (package inbox): the
// IDs of the messages a consumer applied, each key's highest applied
// sequence number and each source partition's next offset, written in the
// same MULTI/EXEC as the handler's effects. It works with any
// redis.UniversalClient: a single node, Sentinel (a failover client) or
// Redis Cluster.
//
//	store, err := redisinbox.New(client, redisinbox.Options{Prefix: "{billing}"})
//	ib, err := inbox.New(store, inbox.Options{})
//	...
//	r, err := ib.Handle(ctx, msg, func(ctx context.Context, tx *redisinbox.Tx, m inbox.Message) error {
//		tx.Pipe().IncrBy(ctx, store.Key("balance:42"), 500) // applied with the record, at EXEC
//		return nil
//	})
//
// # Transactions
//
// Redis has no rollback and no locks; a [Tx] is optimistic. [Store.InTx]
// takes a connection and gives fn a Tx holding it and a MULTI
// ([Tx.Pipe]). The store's reads WATCH what they read on that connection,
// its writes and the handler's effects are queued in the MULTI, and EXEC
// applies all of them, or none when another client wrote a WATCHed key
// meanwhile: the commit then fails with an error for which
// [Store.Retryable] is true, and inbox.Inbox runs the transaction again
// (where the store now reads the other transaction's writes). So two
// consumers handling the same message at once both see it as new, both
// run the handler, and exactly one EXEC applies it; the other, run again,
// finds it recorded and skips it as a duplicate. The same holds for two
// messages of one key (the key's sequence number is WATCHed).
//
// A handler whose effect depends on a value it reads (a balance it checks)
// reads it with [Tx.WatchRead], which WATCHes it too, so a concurrent
// change retries the transaction rather than applying a stale effect.
//
// Round trips per transaction (inbox.Inbox.Handle or HandleBatch, any
// number of messages; counted by TestRoundTrips), on a single node,
// Sentinel or Cluster alike:
//
//	a new message                          2: Record (WATCH + MGET of the ID keys, TIME), EXEC
//	a new message with a sequence number   2: RecordWithKeySeqs (the same plus WATCH + MGET of the keys' numbers), EXEC
//	a duplicate                            2: Record, UNWATCH (nothing to apply: no EXEC)
//	a duplicate with an offset             2: Record, EXEC (the offset)
//	a batch of both kinds                  2
//
// (An Inbox that does not use the optional RecordWithKeySeqs calls Record
// and KeySeqs apart: one more round trip for numbered messages. SetKeySeqs,
// SaveOffsets and Finish only queue writes in the MULTI.)
//
// A transaction that rolls back after a WATCH sends UNWATCH (one round
// trip) so that no WATCH stays on the pooled connection to fail a later,
// unrelated transaction.
//
// Design note: on Redis Cluster, go-redis's ClusterClient.Watch finds the
// slot's master by WATCHing a key, a round trip of its own (the anchor
// key, "<prefix>:anchor", which is never written). InTx instead takes the
// master from go-redis's slot map (ClusterClient.MasterForKey, no round
// trip) and runs the transaction on that node's client, which saves that
// round trip in every transaction (a new message: 2 instead of 3). The price is that a slot that moved
// since the map was loaded (a resharding, a failover go-redis has not
// seen) is answered MOVED or ASK at the transaction's first command; InTx
// then asks go-redis to reload its map and returns an error for which
// Retryable is true, so inbox.Inbox runs the transaction again (nothing
// was applied). Through any other redis.UniversalClient (a Ring), InTx
// uses Watch with the anchor, one more round trip.
//
// # Keys
//
// Options.Prefix holds exactly one hash tag, "{inbox}" by default, and
// every key of the inbox shares it, so on Cluster they all live in one
// slot and one MULTI can hold them. For prefix "{inbox}":
//
//	{inbox}:id:<id>      string  an applied message ID -> the server time (ms) its transaction ran at
//	{inbox}:ids          zset    applied ID -> that time (ms): what Purge reads, oldest first
//	{inbox}:seq:<key>    string  a message key -> its highest applied sequence number (decimal)
//	{inbox}:seqs         zset    message key -> the time (ms) its number was last set
//	{inbox}:offsets      hash    "<len(group)>:<group><len(topic)>:<topic>:<partition>" -> next offset
//	{inbox}:anchor       (never written; the key a Ring's transactions WATCH to pick their shard)
//
// An ID or a key is used in a key name as it is (any bytes, braces
// included: Redis Cluster hashes the first tag, the prefix's). Each
// applied ID costs one string key and one sorted-set member: measured
// with MEMORY USAGE on Redis 7.0 for 10,000 UUIDs under a 21-byte prefix,
// 120 bytes for the key and 145 for the member, about 265 bytes an ID
// (1M IDs kept for the retention horizon: about 265 MB). Purge removes
// them after the horizon.
//
// # Effects on Cluster
//
// The handler's effects share the transaction, so on Redis Cluster every
// key it queues in Pipe or watches must carry the inbox's hash tag:
// [Store.Key] builds one under the prefix ("{inbox}:balance:42"), and any
// key containing [Store.HashTag] ("balance:{inbox}:42") does as well. A
// key in another slot fails the commit (CROSSSLOT or MOVED when queued)
// and nothing is applied; the error says so. All of one inbox's traffic
// therefore goes to one master: consumers that need more than one node's
// throughput split their messages over several inboxes (prefixes with
// different tags), each with its effects in its own slot. On a single
// node the effects may use any key, though the tag keeps them ready for
// Cluster.
//
// # With the outbox
//
// A handler can append outbox entries in the same EXEC as its effects and
// the record (consume, transform, produce): redisoutbox's AppendInTx
// takes the Pipe, ob.AppendInTx(ctx, tx.Pipe(), entry). A duplicate then
// appends nothing, and neither does a transaction that rolls back. On
// Redis Cluster the outbox's partition keys are in slots of their own
// ("{outbox:p}"), so this works on a single node (or Sentinel) only. An
// append refused at run time (a sealed outbox) is an [*ExecError]: the
// record and the other effects were applied.
//
// # What breaks the guarantee
//
// Beyond what package inbox lists (effects written outside the
// transaction, records purged before a redelivery):
//
//   - A queued command that fails at run time (a command on a key of the
//     wrong type): Redis applies every other command of the EXEC, the
//     inbox's records included, and InTx returns an [*ExecError]. The
//     message counts as applied and the failed effect must be repaired by
//     hand. Queue only commands that cannot fail that way.
//   - Eviction: run Redis with maxmemory-policy noeviction. An evicted
//     record lets a redelivery be applied again.
//   - Durability: the records are as durable as the effects, since they
//     are written in the same EXEC (the AOF logs a MULTI/EXEC as a
//     whole). With appendfsync everysec a crash can lose the last second
//     of both; the messages were acknowledged, so their effects are lost
//     unless the consumer resumes from offsets stored here (the Kafka
//     helper does), which roll back with them and make the broker
//     deliver those messages again. Use appendfsync always when an
//     acknowledged effect must survive a crash. Replication is
//     asynchronous: a failover to a replica that had not received the
//     last EXECs loses them the same way (Redis's WAIT narrows that
//     window; it does not close it).
//
// # Retention
//
// [Store.Purge] (run by inbox.RunJanitor) reads the oldest records below
// the horizon with ZRANGE BYSCORE and removes them with one script,
// purge.lua, whose KEYS name every key it touches. It checks each score
// again, so a record written again since the ZRANGE stays. It never
// blocks a transaction: one that WATCHed a record being removed fails its
// commit, runs again, and finds the record gone (as for any record past
// the horizon, a redelivery is then applied again).
package redisinbox
