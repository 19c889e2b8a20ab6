// Package mysqlinbox is the MySQL and MariaDB store of an inbox (package
// inbox): it records the applied messages' IDs, the keys' highest applied
// sequence numbers and the source partitions' next offsets in the
// consumer's own *sql.Tx, next to the handler's effects, so that each
// message's effects commit exactly once.
//
//	store, err := mysqlinbox.New(db, mysqlinbox.Options{}) // db from sql.Open("mysql", dsn)
//	ib, err := inbox.New(store, inbox.Options{})
//	r, err := ib.Handle(ctx, msg, func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
//		_, err := tx.ExecContext(ctx, "UPDATE ...") // the effect, in tx
//		return err
//	})
//
// It runs on MySQL 8.0.13 and later and MariaDB 10.6 and later (tested:
// MariaDB 10.11, at REPEATABLE READ, at READ COMMITTED and with MariaDB's
// innodb_snapshot_isolation), with github.com/go-sql-driver/mysql.
//
// # Schema
//
// [Migrate] creates three tables in the connection's database (named
// after [Options].Table, default "inbox"), from the embedded migration
// 001_create_inbox ([Migrations], [MigrationSQL]), and two procedures
// (002_procedures: Table+"_record_keys", Table+"_finish"); Table+"_migrations"
// records the applied versions, and a named lock ([LockName]) serializes
// concurrent runs. MySQL commits each DDL statement on its own, so every
// statement is IF NOT EXISTS and an interrupted run is completed by the
// next. [MigrateDown] drops them all.
//
//   - inbox (id VARBINARY(255) primary key, applied_at DATETIME(6), tok
//     BIGINT; index applied_at_idx): one row per applied ID. VARBINARY
//     compares IDs byte for byte, as Go does: under utf8mb4_bin, a PAD
//     SPACE collation, "a" and "a " would be one ID (the second message
//     skipped as a duplicate of the first), and under a _ci collation "a"
//     and "A" would. An ID is at most 255 bytes (outbox.MaxIDLen), any
//     bytes.
//   - inbox_keyseq (key_hash BINARY(32) primary key, k VARBINARY(4096),
//     seq BIGINT NULL, updated_at DATETIME(6); index updated_at_idx): one
//     row per key, found by the SHA-256 of the key (a key is up to 4096
//     bytes, more than an InnoDB index key holds). seq NULL marks a row
//     that is only a lock (see Locks): the key reads as absent.
//   - inbox_offsets (grp, topic VARBINARY(255), part INT, next BIGINT;
//     primary key (grp, topic, part)): never purged.
//
// Times are UTC from the server's clock (UTC_TIMESTAMP(6)), in DATETIME
// rather than TIMESTAMP: no 2038 limit, and no conversion through the
// session's time_zone when Purge compares them with its horizon, which it
// sends as microseconds since the Unix epoch. Purge's horizon comes from
// the consumer's clock (inbox.RunJanitor: now minus the retention), so
// the two clocks should agree to well within the retention.
//
// # Recording an ID in one round trip
//
// MySQL has no RETURNING on INSERT (MariaDB has, from 10.5; this package
// keeps one code path for both). Record sends the call's IDs, sorted and
// without repeats, as one JSON array (JSON_TABLE, so the statement's text
// does not depend on the count and stays prepared) in one INSERT IGNORE:
// an ID already recorded is skipped, and the affected-rows count says how
// many were new. When that count is the number of IDs, all are new; when
// it is 0, none is: one round trip, which covers a single message and
// every batch that is all new or all redelivered. Only a batch that is
// partly both needs a second statement, which reads which of the IDs
// carry the call's random token (column tok): the rows it inserted,
// which its own transaction always sees.
//
// Why not a plain read: at REPEATABLE READ a transaction reads its
// snapshot, so a SELECT after an INSERT IGNORE that waited for another
// transaction's uncommitted row does not see that row even after it
// committed (the tests show it). Record never decides from a snapshot: the
// insert itself waits for the other transaction's row lock (up to
// innodb_lock_wait_timeout), then skips the ID if that transaction
// committed, or inserts it if it rolled back. A store that checked with
// SELECT first and inserted after would let two transactions both find
// the ID missing. The IDs are inserted in sorted order, so two batches
// lock shared IDs in the same order and do not deadlock on each other.
//
// INSERT IGNORE turns some errors into warnings (a value too long is cut);
// Record checks the lengths first, so the only row it skips is a
// duplicate. The affected-rows count of INSERT IGNORE does not depend on
// the DSN's clientFoundRows.
//
// Rejected alternatives: INSERT ... ON DUPLICATE KEY UPDATE id = id
// reports per statement too, but takes an exclusive lock on each
// duplicate (two redeliveries of one ID would serialize, where INSERT
// IGNORE's shared lock lets them pass together), and its count changes
// with clientFoundRows. MariaDB's INSERT ... RETURNING answers per row in
// one round trip always, but MySQL 8 has none. A stored procedure would
// too, but Record needs none for its common cases; the procedures are
// kept for what takes two statements otherwise (see Round trips).
// Checking with a SELECT first and inserting after is racy, and at
// REPEATABLE READ wrong (see above).
//
// # Round trips
//
// Statements are prepared once per Store (on the first InTx, Offsets or
// Purge, then on each pool connection they first run on), so each is one
// round trip without relying on interpolateParams. Counted by
// TestRoundTrips and TestRoundTripsOutsideTransactions:
//
//	InTx          2 (START TRANSACTION, COMMIT); 3 with Options.Isolation
//	Record        1 when every ID is new or none is; 2 when some are (per 1,000 IDs)
//	KeySeqs       1 when every key has a row; 2 when some have none (the lock rows);
//	              3 when a concurrent transaction inserted one of those meanwhile
//	SetKeySeqs    1 (per 1,000 keys)
//	SaveOffsets   1 (per 1,000 partitions)
//	Offsets       1, on the pool
//	Purge         5 when nothing is old (SET TRANSACTION, START, two reads,
//	              COMMIT), 7 when both IDs and keys are removed
//	RecordWithKeySeqs  1 (one CALL; Record then KeySeqs without the procedure)
//	Finish        1 (one CALL; SetKeySeqs then SaveOffsets without it)
//
// So inbox.Inbox.Handle of a message without a key or offset is 3 round
// trips plus the handler's statements (START, INSERT IGNORE, COMMIT) —
// one more than the handler's own transaction would cost without the
// inbox — and of a message with a key, a sequence number and an offset 4
// (START, the two CALLs, COMMIT) with an Inbox that uses the optional
// inbox.KeyRecorder and inbox.Finisher, 6 without. A batch (HandleBatch,
// the Kafka helper's MaxBatch) costs the same statements for all its
// messages.
//
// The combined calls need stored procedures because MySQL sends one
// statement per round trip (unless the DSN sets multiStatements, which a
// library cannot require) and an INSERT returns no rows. Migration 002
// creates them, SQL SECURITY INVOKER (they run with the caller's
// privileges); with an inbox migrated to version 1 only, the Store finds
// them missing (error 1305, which changes nothing) and sends the separate
// statements, trying the procedures again a minute later.
//
// The 13 statements, prepared on each pool connection that runs them,
// count against the server's max_prepared_stmt_count (16,382 by default,
// for all its clients): size it for the connections of every consumer.
//
// A transaction of another *sql.DB than the one given to New cannot use
// the prepared statements: they then run unprepared (two or three round
// trips each, unless the DSN sets interpolateParams=true).
//
// # Locks
//
// KeySeqs is a locking read (SELECT ... FOR UPDATE by the primary key, a
// record lock per existing key), so two handlers of one key serialize and
// the later reads the number the earlier committed. For a key without a
// row it inserts one with seq NULL, which the transaction holds until it
// ends: at READ COMMITTED a locking read of a missing row locks nothing,
// so without it two transactions could both find a new key missing.
// Every lookup is forced onto the primary key (FORCE INDEX): on a small
// table the optimizer would rather scan, and a locking scan locks every
// row.
//
// Record locks its IDs in sorted order and KeySeqs its keys in the order
// of their hashes, and the inbox calls Record before KeySeqs, so inbox
// transactions acquire their row locks in one global order and do not
// deadlock with each other over IDs and keys (TestOverlappingBatchesApplyOnce:
// four consumers, about 20 overlapping partly applied batches, no
// conflict at either level), gap locks aside (below); the handlers' own
// effects may still.
//
// At REPEATABLE READ, the locking read of a missing key also takes a gap
// lock; two transactions that each read a new key falling into the same
// gap of the index then wait for (or deadlock with) each other's insert,
// which costs a retry (error 1213, which [Store.Retryable] accepts and
// inbox.Inbox retries). That happens mostly while the table is nearly
// empty. Options.Isolation = sql.LevelReadCommitted (for the transactions
// InTx begins) avoids gap locks altogether; the inbox is correct at both
// levels. Likewise, the check of a duplicate ID holds a next-key lock
// (InnoDB takes one for duplicate-key checks at both levels), which can
// make a new ID that sorts just before it wait for the duplicate's
// transaction.
//
// Purge runs in a READ COMMITTED transaction of its own: SELECT ... FOR
// UPDATE SKIP LOCKED by the applied_at (updated_at) index, oldest first,
// then a DELETE by the primary keys it locked. It never waits for a
// handler's transaction, and takes no gap lock that would make a handler
// wait for it.
//
// # Errors and retries
//
// [Store.Retryable] is true for a deadlock (1213), a lock wait timeout
// (1205) and, on MariaDB with innodb_snapshot_isolation (the default from
// 11.6), a row changed since the transaction's snapshot (1020: Record of
// an ID another transaction committed after the snapshot began gets it
// instead of a wait, and the retry then reports the ID as a duplicate).
// A lost connection is not retryable: a commit whose connection broke
// may have committed, and the consumer's redelivery (which the recorded
// ID then skips) is the safe way on. A missing table is reported with
// the advice to run Migrate. Errors start with "mysqlinbox:"; context
// errors pass through unwrapped.
//
// After a deadlock the server has rolled the whole transaction back, and
// the connection is no longer in a transaction: statements sent on it
// afterwards would each commit on their own. A handler must therefore
// return the errors of its statements, not swallow them, and a caller of
// inbox.Inbox.Apply must roll back (and not commit) after an error.
//
// With binlog_format=STATEMENT, the server logs INSERT IGNORE ... SELECT
// and INSERT ... SELECT ... ON DUPLICATE KEY UPDATE as unsafe (a warning
// per statement); use ROW (MySQL's default) or MIXED (MariaDB's).
//
// # Grants
//
// Consumers need SELECT, INSERT, UPDATE and DELETE on the three tables
// and EXECUTE on the two procedures; Migrate needs CREATE, DROP, CREATE
// ROUTINE and ALTER ROUTINE as well (and INSERT and DELETE on
// Table+"_migrations"). MySQL with binary logging accepts the procedures
// without log_bin_trust_function_creators (that applies to functions and
// triggers).
//
// # Retention
//
// Records grow with every message applied: run inbox.RunJanitor (or
// inbox.PurgeOnce) with a retention longer than any redelivery can come
// after the first delivery (the broker's retention, e.g. Kafka's 7 days
// when a consumer can rewind to the start). Each Purge removes at most
// JanitorOptions.BatchSize IDs and keys, oldest first, in a short
// transaction of its own. A record takes about 140 bytes with its index
// entries for a 36-character UUID (measured on MariaDB 10.11: 100,000
// records in insertion order, 13.7 MB); IDs in random order fill the
// pages less.
package mysqlinbox
