// Package mysqloutbox is the MySQL and MariaDB backend of the outbox,
// built on database/sql with github.com/go-sql-driver/mysql. Its
// transaction type is *sql.Tx: append entries in your own transaction
// with [Backend.AppendInTx], and a relay built with outbox.NewRelay
// publishes them.
//
//	db, _ := sql.Open("mysql", "user:password@tcp(host:3306)/app")
//	// Once per deploy; creates the outbox with 8 partitions.
//	if err := mysqloutbox.Migrate(ctx, db, mysqloutbox.Options{Partitions: 8}); err != nil { ... }
//	b, err := mysqloutbox.New(ctx, db, mysqloutbox.Options{}) // reads the stored count, 8
//	err = b.InTx(ctx, db, func(tx *sql.Tx) error {
//		// ... business writes in tx ...
//		return b.AppendInTx(ctx, tx, outbox.Entry{Topic: "orders", Key: orderID, Payload: body})
//	}) // commits, then wakes this process's relays for the partitions appended to
//
// AppendInTx works in any *sql.Tx; [Backend.InTx] also retries the
// transaction after a deadlock or a lock wait timeout and notifies the
// relays of the same process after the commit. After committing a
// transaction of your own, [Backend.Notify] does the latter.
//
// The same schema and statements run on MySQL 8.0 and later and on
// MariaDB 10.6 and later (tested: MariaDB 10.11). They rely on InnoDB,
// DATETIME(6), STORED generated columns, JSON_TABLE, multi-table UPDATE
// and DELETE, and LOCK IN SHARE MODE. docs/mysql.md in the repository has
// the details and measurements.
//
// # Schema
//
// [Migrate] creates, in the connection's database: the outbox table
// (Options.Table, "outbox"), "<table>_lease" with one row per partition
// (never deleted, so versions never go back), "<table>_meta" with the
// partition count and the seal of a move, "<table>_archive" for
// Options.Archive, "<table>_hold" and "<table>_import" for moving the
// outbox, "<table>_member" for relay fleets, "<table>_keyseq" for
// Options.KeySequence, "<table>_pause_topic" and "<table>_pause_part" for
// pauses, and "<table>_migrations". Rows are ordered by seq, an
// AUTO_INCREMENT primary key assigned at insert. Two generated columns
// keep the fetch on its indexes: key_hash (SHA-256 of the key, which may
// be up to 4,096 bytes) and holds (the entry is pending and was attempted
// or deferred, so it holds back the later entries of its key). Every time
// is stored in UTC by the server's clock (UTC_TIMESTAMP(6)) and exchanged
// as microseconds since the epoch, so no DSN setting (parseTime, loc) and
// no session time_zone changes what is stored or read.
//
// # Leases and locking
//
// The partition lease row (owner, version, expiry) is the claim: only the
// lease holder reads a partition, so a fetch writes nothing per row, and a
// dead relay's entries come back as soon as its lease is taken over. A
// fetch is one SELECT that reads the lease row and the due entries
// together (no row at all: the lease is lost). MarkSent and MarkFailed
// are one multi-table DELETE or UPDATE each, joined to the lease row;
// InnoDB reads the rows of a table such a statement only reads with
// shared locks in every isolation level (unlike a single-table UPDATE
// with a subquery, or INSERT ... SELECT, which read without locks under
// READ COMMITTED), so a takeover, which updates the lease row, waits for
// a fenced write in flight, and a write that starts after a takeover
// changes nothing and returns outbox.ErrLeaseLost. MarkSent with
// Options.Archive runs a transaction that first reads the lease row
// LOCK IN SHARE MODE. Release only checks the lease. The backend works
// under the server's default REPEATABLE READ and under READ COMMITTED;
// its own statements run in autocommit mode or in short transactions of
// their own, never in the caller's except AppendInTx.
//
// # Fetching
//
// A fetch walks the index (partition, state, next_at, seq) in due order
// and stops after the limit: no filesort (TestFetchPlan checks the plan
// on the server). Every statement names the index it reads through
// (FORCE INDEX, STRAIGHT_JOIN), so its plan does not depend on the
// table's statistics: a new or fast-growing outbox whose statistics
// InnoDB has not collected yet is read as a large one is. The per-key hold-back is an anti-join on the index
// (partition, holds, key_hash, seq) that compares the key itself too. A
// held outbox (a move's [Backend.Hold]) and a paused partition return
// nothing; a paused topic's entries are left out together with the later
// entries of their keys. Entries whose stored data cannot be published
// (headers that do not decode, an empty topic: only a hand-made UPDATE
// writes them) are parked by the fetch with a reason naming the column
// and the fix ([Backend.FetchBatch]). [Backend.FetchNext] claims the next
// batch while one is in flight ([outbox.Prefetcher]).
//
// # Retries
//
// MarkFailed computes a failure's due time by the server's clock,
// UTC_TIMESTAMP(6) plus Failure.Delay, and keeps the last
// outbox.MaxAttemptHistory attempts in a JSON column. Errors are cut at
// 4,096 bytes on a character boundary.
//
// # Polling and notifications
//
// MySQL has no LISTEN/NOTIFY: relays poll each partition they hold. A
// relay whose RelayOptions.PollInterval is zero polls every
// [DefaultPollInterval] ([Backend.PollInterval], an outbox.PollAdvisor)
// when nothing wakes it sooner. A Backend is an in-process
// [outbox.Notifier]: [Backend.InTx] after its commit, and
// [Backend.Notify], wake the relays of the same process built on it, so
// an appender in the relay's process gets its entries published without
// waiting for the next poll; appenders in other processes are found by
// polling.
//
// # Statements and round trips
//
// The relay's statements are prepared once per Backend (and again on each
// pool connection they first run on), so each runs in one round trip; the
// queries are in queries/*.sql, embedded. A fetch is one round trip; so is
// MarkSent or MarkFailed of up to 1,000 entries when every ID names an
// entry of the partition (a second query tells a lost lease from unknown
// IDs otherwise). Longer lists are split into statements of 1,000 IDs,
// passed as one JSON array (JSON_TABLE), so no statement's text depends
// on the list's length. MarkSent with the archive takes five: start, the
// lease row locked, the copy, the delete, commit.
//
// # Archive
//
// With Options.Archive, MarkSent moves sent entries to "<table>_archive"
// with their send time; an entry sent again replaces its earlier copy.
// [Backend.PurgeArchiveBatch] (outbox.ArchiveJanitor, which a relay with
// RelayOptions.ArchiveRetention calls) deletes old ones in bounded
// batches, oldest first, skipping rows other transactions hold, with a
// lock wait bound of [PurgeLockWait]; [Backend.PurgeArchive] runs the same
// batches by hand.
//
// # Retention and health
//
// Migration 002 records when an entry was parked (parked_at);
// [Backend.PurgeParked] (outbox.ParkedPurger) removes entries parked
// before a time as Cancel removes them. [Backend.Health]
// (outbox.HealthChecker) reports the outbox table's and the archive's size
// from information_schema.TABLES and warns of what keeps InnoDB from
// purging deleted rows: a long history list ("purge-lag") and old open
// transactions ("long-transaction", Options.LongTransaction). The
// transaction checks need the PROCESS privilege.
package mysqloutbox
