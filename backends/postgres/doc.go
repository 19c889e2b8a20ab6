// Package pgoutbox is the PostgreSQL backend of the outbox, built on pgx v5.
//
// Append entries inside your own transaction with [Backend.AppendInTx]
// (or [Backend.AppendInSQLTx] with a database/sql *sql.Tx); a relay built with outbox.NewRelay
// publishes them.
//
//	pool, _ := pgxpool.New(ctx, url)
//	if err := pgoutbox.Migrate(ctx, pool, pgoutbox.Options{}); err != nil { ... }
//	b, _ := pgoutbox.New(pool, pgoutbox.Options{})
//	tx, _ := pool.Begin(ctx)
//	// ... business writes ...
//	_ = b.AppendInTx(ctx, tx, outbox.Entry{Topic: "orders", Key: orderID, Payload: body})
//	_ = tx.Commit(ctx)
//
// # Schema
//
// [Migrate] creates, in Options.Schema ("public"): the outbox table
// (Options.Table, "outbox"), "<table>_lease" with one row per partition,
// "<table>_archive" for Options.Archive, and "<table>_migrations" recording
// applied versions. The same numbered files are in [Migrations] for goose
// or golang-migrate. docs/postgres.md in the repository has the columns,
// indexes and query plans.
//
// # Leases
//
// The partition lease row (owner, version, expiry) is the claim: only the
// lease holder reads a partition, so FindPendingBatch writes nothing per
// row and a dead relay's entries come back as soon as its lease is taken
// over. MarkSent, MarkFailed and Release are single statements fenced by
// the lease row (read FOR SHARE in the same statement): a stale holder
// changes nothing and gets outbox.ErrLeaseLost. Versions never go back:
// releasing a lease marks its row free instead of deleting it.
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
// Relays wake on a NOTIFY on Options.Channel ([Backend.Notifications]).
// A NOTIFY makes PostgreSQL commit notifying transactions one at a time,
// so appends do not notify in every transaction: at most one appending
// transaction per Options.NotifyInterval (2 ms) notifies in itself, and
// for the others the Backend sends a trailing NOTIFY from a connection of
// its own once it sees their transaction committed (pg_xact_status), never
// for a rolled-back one. Options.NoNotify turns notifications off.
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
