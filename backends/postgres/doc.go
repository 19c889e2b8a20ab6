// Package pgoutbox is the PostgreSQL backend of the outbox, built on pgx v5.
//
// Append entries inside your own transaction with [Backend.AppendInTx]
// (or [Backend.AppendInSQLTx] with a database/sql *sql.Tx); a relay built with outbox.NewRelay
// publishes them.
//
//	pool, _ := pgxpool.New(ctx, url)
//	// Once per deploy (safe from every replica); creates the outbox with 8 partitions.
//	if err := pgoutbox.Migrate(ctx, pool, pgoutbox.Options{Partitions: 8}); err != nil { ... }
//	b, err := pgoutbox.New(ctx, pool, pgoutbox.Options{}) // reads the stored count, 8
//	tx, _ := pool.Begin(ctx)
//	// ... business writes ...
//	_ = b.AppendInTx(ctx, tx, outbox.Entry{Topic: "orders", Key: orderID, Payload: body})
//	_ = tx.Commit(ctx)
//
// # Schema
//
// [Migrate] creates, in Options.Schema ("public"): the outbox table
// (Options.Table, "outbox"), "<table>_lease" with one row per partition,
// "<table>_meta" holding the partition count, "<table>_member" for relay
// fleets ([outbox.Membership]), "<table>_archive" for Options.Archive
// (a plain table, or with Options.ArchivePartitioned one partitioned by
// UTC day, "<table>_archive_pYYYYMMDD" and "<table>_archive_default"; see
// [PartitionArchive] and [Backend.PurgeArchiveBatch]),
// "<table>_keyseq" with the per-key sequence counters of
// Options.KeySequence (migration 005), "<table>_hold", the sequence
// "<table>_import_seq" and the function "<table>_seal" for moving the
// outbox (migration 006), "<table>_pause_topic" and "<table>_pause_part"
// for pauses (migration 007, which also adds the attempt history and the
// deferral to the outbox table and the host, version and start to the
// member table), the park time "parked_at" of parked entries (migration
// 008, for [Backend.PurgeParked]), and "<table>_migrations" recording
// applied versions. [New]
// requires migration 007: run Migrate before starting this version. The same numbered files
// are in [Migrations] for goose or golang-migrate; [MigrationSQL] returns
// them rendered for given Options. docs/postgres.md in the repository has
// the columns, indexes and query plans.
//
// # Partitions
//
// The partition count is stored with the outbox: migration 004 writes
// Options.Partitions (required when Migrate creates the outbox) to
// "<table>_meta" and creates the lease rows of partitions 0..N-1. [New]
// reads it: Options.Partitions 0 takes the stored count, any other value
// must equal it, else New fails with an [*outbox.PartitionMismatchError];
// Migrate checks the same on an existing outbox. The file of migration 004
// holds the placeholder {partitions} for the count: Migrate and
// MigrationSQL render it; with goose or golang-migrate, replace it with
// your count (unreplaced, the file fails with a syntax error). An outbox
// created before 004 gets its count stored when Migrate runs 004 with
// Options.Partitions: the count its appenders and relays have been using.
// New on a schema without the outbox says so and how to create it
// (Migrate, or "outbox migrate up --partitions N").
//
// # Leases
//
// The partition lease row (owner, version, expiry) is the claim: only the
// lease holder reads a partition, so FindPendingBatch writes nothing per
// row and a dead relay's entries come back as soon as its lease is taken
// over. MarkSent, MarkFailed and Release are single statements fenced by
// the lease row (read FOR SHARE in the same statement): a stale holder
// changes nothing and gets outbox.ErrLeaseLost. AcquireLease is a plain
// UPDATE of the lease row whose condition (free, expired, or held by the
// same owner) PostgreSQL checks before it locks the row, so a standby's
// acquire of a held lease fails with outbox.ErrLeaseHeld without taking a
// lock and never waits for, or delays, the holder's fenced writes.
// Versions never go back: releasing a lease marks its row free instead of
// deleting it.
//
// # Retries
//
// MarkFailed computes a failure's due time on the database's clock, now()
// plus Failure.Delay, so relays whose clocks drift never make a retry
// early or late.
//
// # Ordering
//
// Entries are ordered by (next attempt time, seq), seq being an identity
// column assigned at insert. Transactions that append to one key
// concurrently without otherwise serializing (e.g. on the aggregate's row)
// are ordered by insert, not by commit.
//
// # Notifications
//
// Relays wake on a NOTIFY on Options.Channel ([Backend.Notifications]),
// whose payload lists the partitions appended to (comma-separated, split
// over several notifications past 700 partitions); the channel receives
// one value per partition, or [outbox.AllPartitions] after a reconnect or
// for a payload it cannot read. A NOTIFY makes PostgreSQL commit notifying
// transactions one at a time, so appends do not notify in every
// transaction: at most one appending transaction per Options.NotifyInterval
// (2 ms) notifies in itself, and for the others the Backend sends a
// trailing NOTIFY with the union of their partitions from a connection of
// its own once it sees their transactions committed (pg_xact_status),
// never for a rolled-back one. Options.NoNotify turns notifications off.
//
// # Membership
//
// [Backend.Heartbeat] and [Backend.Leave] keep the records of a relay
// fleet in "<table>_member": one statement per heartbeat upserts the
// caller's record (expiry by the database's clock), deletes expired
// records and returns the live ones.
//
// # Inspection
//
// Besides [outbox.Inspector] (Stats, Parked, Requeue) and Cancel, a
// Backend is an [outbox.PartitionInspector] and an [outbox.Looker]:
// [Backend.PartitionStats] reports every partition's counts, live lease,
// oldest due entry and blocked keys in one statement (index-only over the
// due index), and [Backend.Lookup] reads one entry, with its attempt
// history, by primary key.
//
// # Moving
//
// A Backend can be moved from and to (see the outbox package's move.go and
// package move): [Backend.ExportBatch] reads a partition's rows of every
// state in seq order, fenced by the lease, and [Backend.RemoveExported]
// deletes them (fenced, never archived); [Backend.Import] inserts entries
// in one statement with seq values from "<table>_import_seq", which counts
// up from the lowest bigint, so they come before every appended entry in
// the fetch's (due time, seq) order and in the per-key hold-back;
// [Backend.Hold] writes the row of "<table>_hold", which the fetch
// statement checks once (a one-time filter), so a held outbox fetches
// nothing; [Backend.Seal] creates BEFORE INSERT triggers running
// "<table>_seal" under table locks that wait for open appending
// transactions, so every later append fails with an error wrapping
// [outbox.ErrSealed]; no trigger exists, and appends run no code of it,
// until an outbox is sealed. Exported entries carry their attempt history
// and deferral, and Import stores them.
//
// # Operators
//
// A Backend is an [outbox.Lister], an [outbox.Pauser] and an
// [outbox.MemberLister]. [Backend.MarkFailed] appends each attempt (time,
// error, lease owner) to the entry's history column (JSON, the last
// [outbox.MaxAttemptHistory]) in the statement that records the failure,
// and a [outbox.Failure] Deferred only moves the due time and sets the
// deferred column, which the per-key hold-back (and its partial index)
// counts like an attempt. Pauses are rows of "<table>_pause_topic" and
// "<table>_pause_part", checked by the fetch statement: while nothing is
// paused, once per statement (one-time filters, the due index walk
// unchanged); while a topic is paused, the paused keys of the partition
// are computed once per fetch. [Backend.Entries] and
// [Backend.BlockedKeys] list entries by state and the keys their head
// entry blocks; IDs are paged in byte order (COLLATE "C") whatever the
// database's collation, as are [Backend.Parked]'s.
//
// # Corrupt rows
//
// A row changed by hand so that it cannot be published (headers that
// [DecodeHeaders] does not accept, an empty topic) is parked by the fetch
// that reads it, with a reason naming the column and the fix, and
// reported by [Backend.FetchBatch] ([outbox.BatchFetcher]); the rest of
// its partition keeps flowing. [Backend.Requeue] refuses such a row, and
// one whose partition is out of range, with an
// [*outbox.RequeueRefusedError] until the column is fixed. Every column is
// covered in docs/postgres.md, "Corrupt rows".
//
// # Health
//
// [Backend.Health] ([outbox.HealthChecker]) reports the size, live and dead
// rows and vacuums of the outbox table, its archive and, with
// Options.KeySequence, the key sequence table, and warns when autovacuum
// cannot keep them small: [WarnAutovacuumOff] (the server's autovacuum or
// track_counts is off), [WarnTableAutovacuumDisabled] (a table's
// autovacuum_enabled storage parameter is false) and [WarnXminHorizonHeld]
// (a session, prepared transaction or replication slot has held back the
// xmin horizon for longer than Options.XminHorizonWarning). It is one
// statement over the catalogue and the statistics; the relay calls it
// every RelayOptions.HealthInterval. A role that is neither superuser nor
// a member of pg_read_all_stats cannot read other roles' transaction start
// times: Health then times their snapshots from when it first sees them,
// says so in the warning, and logs at DEBUG that it could not see.
//
// # Tuning
//
// The table is created with aggressive autovacuum settings for its
// insert-once, delete-once churn. Keep transactions short database-wide:
// one long transaction holds back vacuum for every table (see
// docs/postgres.md). No session-level advisory locks or session state are
// used except by the LISTEN connection, so the pool may sit behind
// PgBouncer in transaction mode (set Options.ListenConfig to a direct
// connection). Besides the pool, a Backend opens up to two connections of
// its own: the LISTEN connection (on the first Notifications call) and the
// trailing-notification connection (on the first append that needs it).
package pgoutbox
