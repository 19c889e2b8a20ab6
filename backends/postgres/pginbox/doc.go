// Package pginbox is the PostgreSQL inbox store: it keeps, in the
// consumer's own database, what package inbox needs to apply each
// consumed message's effects exactly once ([inbox.Inbox]). [Store] works
// with pgx transactions (inbox.Store[pgx.Tx]), [SQLStore] with
// database/sql ones (inbox.Store[*sql.Tx]); a handler writes its effects
// through the transaction it is given, and they commit with the record of
// the message's ID.
//
//	pool, _ := pgxpool.New(ctx, url)
//	// Once per deploy (safe from every replica, idempotent):
//	if err := pginbox.Migrate(ctx, pool, pginbox.Options{}); err != nil { ... }
//	store, _ := pginbox.New(pool, pginbox.Options{})
//	ib, _ := inbox.New(store, inbox.Options{})
//	_, err := ib.Handle(ctx, msg, func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
//		_, err := tx.Exec(ctx, "UPDATE accounts SET ...", ...) // the effect
//		return err
//	})
//	// acknowledge msg to the broker only when err is nil
//
// # Schema
//
// [Migrate] creates, in Options.Schema ("public"), with names derived
// from Options.Table ("inbox"):
//
//   - "<table>" (id text COLLATE "C" PRIMARY KEY, applied_at timestamptz
//     NOT NULL DEFAULT now()) and the index "<table>_applied_at_idx":
//     one row per applied message ID. Record inserts, Purge deletes the
//     oldest through the index. COLLATE "C" compares IDs byte for byte
//     (cheaper than a locale's rules, and the same in every database).
//   - "<table>_keyseq" (key text COLLATE "C" PRIMARY KEY, seq bigint NOT
//     NULL, updated_at timestamptz NOT NULL DEFAULT now()) and the index
//     "<table>_keyseq_updated_at_idx": each key's highest applied
//     sequence number, for the per-key order check.
//   - "<table>_offsets" (grp, topic, part, next; PRIMARY KEY (grp, topic,
//     part)): each source partition's next offset per consumer group,
//     stored with the effects.
//   - "<table>_migrations" (version, name, applied_at): the applied
//     migrations, as pgoutbox keeps them.
//
// The same numbered files are in [Migrations] for goose or
// golang-migrate; [MigrationSQL] returns them rendered for given Options,
// and "outbox migrate up|down|status|sql --inbox" runs them from the
// command line. [MigrateDown] drops everything.
//
// Migrate runs in one transaction that first takes a transaction-scoped
// advisory lock on the schema (the one pgoutbox.Migrate takes), so
// replicas starting together, and an outbox migrating into the same
// schema, serialize; no session state is left behind (PgBouncer's
// transaction pooling is fine).
//
// # Tuning
//
// The inbox table is a queue: each row is inserted once and deleted once
// by the janitor, never updated. With PostgreSQL's default autovacuum
// thresholds (20% of the table dead or newly inserted) a table of
// millions of rows collects hundreds of thousands of dead index entries
// between vacuums, which every Record's primary-key probe and every
// Purge's index scan step over. The migration therefore sets, per table,
// autovacuum_vacuum_scale_factor 0.01 (threshold 1,000 rows),
// autovacuum_vacuum_insert_scale_factor 0.02 (insert-only stretches
// still get vacuumed, keeping the visibility map current), analyze at 2%
// (the applied_at histogram follows the moving window) and no cost-based
// vacuum delay. "<table>_keyseq" is updated by every applied message of
// its key: fillfactor 70 leaves room on each page for the new row
// versions. "<table>_offsets" is a handful of rows each updated by every
// transaction of its partition: fillfactor 50 and a vacuum every 1,000
// dead rows keep its updates HOT and the table a few pages long.
//
// # Queries
//
// Each method is one statement, one round trip, embedded from
// queries/<method>.sql:
//
//   - Record: INSERT ... SELECT the distinct IDs of unnest($1) WITH
//     ORDINALITY, in byte order, ON CONFLICT DO NOTHING RETURNING the
//     position of each inserted ID; an ID repeated in one call is new at
//     its first position only. A concurrent uncommitted insert of the same
//     ID makes Record wait for it (then false if it committed, true if it
//     rolled back).
//   - KeySeqs: an upsert that locks each key's row in byte order, creating
//     a placeholder (seq 0, reported as absent) for a key without one, so
//     a concurrent transaction of the same new key waits too; a plain
//     SELECT ... FOR UPDATE locks nothing for a key without a row.
//   - SetKeySeqs, SaveOffsets: upserts from arrays, in key order.
//   - Offsets: a primary-key range scan.
//   - Purge: one statement with two DELETEs, each of at most limit rows
//     chosen oldest first through its time index FOR UPDATE SKIP LOCKED,
//     then deleted through the primary key (= ANY(ARRAY(...)); IN (...)
//     is planned as a semi join over the whole table).
//   - RecordWithKeySeqs and Finish, the Inbox's optional KeyRecorder and
//     Finisher: Record with KeySeqs, and SetKeySeqs with SaveOffsets, in
//     one statement each, so a transaction of numbered messages with
//     offsets costs two round trips besides its effects instead of four.
//
// Arrays travel as Go slices with pgx and as array literals in strings
// with database/sql, so [SQLStore] works with any PostgreSQL driver.
//
// # Errors and retries
//
// Neither store retries or sleeps: the Inbox owns that. Retryable is true
// for the SQLSTATEs 40001 (serialization failure: under REPEATABLE READ
// or SERIALIZABLE, an ID or key committed after the snapshot), 40P01
// (deadlock) and 55P03 (lock_timeout). It is false for a connection that
// broke, at commit in particular: the commit may have happened, so the
// Inbox returns the error, the consumer does not acknowledge the message,
// and the broker's redelivery is reported a duplicate if it did (or
// applied if it did not); either way the effects commit once. Context
// errors pass through unwrapped; other errors start with "pginbox:" and a
// missing table says how to create it.
package pginbox
