// Package appender is the appender process of the chaos harness ("chaos
// appender <flags>"): it appends entries to an existing outbox, one per
// transaction, and records in a history file (chaos/history) what it
// committed, so the checker can compare it with what the broker received.
//
// # Entries
//
// An appender named NAME owns the keys NAME-k0000 .. NAME-k{N-1} (-keys N):
// the checker needs one appender per key. Entry IDs are KEY-SEQ, that is
// NAME-kKEYINDEX-SEQ ("a1-k0003-17"), SEQ being the key's sequence number
// 1, 2, 3, ... Each of the -workers goroutines owns a disjoint subset of the
// keys (key i belongs to worker i mod W) and appends them round robin; it
// starts a key's next entry only once the current one is confirmed, so a
// key's sequence order is its commit order. IDs are unique as long as every
// appender run has its own name: a run restarted under the same name would
// reuse IDs, which the outbox skips as duplicates. The history file must
// not exist or be empty (Main refuses to overwrite a history).
//
// # One transaction
//
// Postgres: pool.Begin, Backend.AppendInTx, tx.Commit. MySQL (mysql://):
// db.BeginTx, mysqloutbox's Backend.AppendInTx on the *sql.Tx, tx.Commit.
// Redis: a TxPipeline (MULTI/EXEC) holding Backend.AppendInTx, its Exec
// checked with redisoutbox.CheckExec. Outcomes:
//
//   - Commit or Exec succeeded: an append line for the entry.
//   - A failure before the commit (Begin, AppendInTx) or a definite
//     rollback (pgx.ErrTxCommitRollback, an ERROR-severity server error,
//     an error pgconn reports as raised before anything was sent;
//     ER_LOCK_DEADLOCK or sql.ErrTxDone on MySQL; EXECABORT, a WATCH
//     conflict or CROSSSLOT on Redis): nothing was
//     committed; the same entry (same ID) is retried after a backoff of
//     10 ms doubling to 500 ms.
//   - Any other failure of the commit or Exec (a connection that died, a
//     timeout, a FATAL server error such as pg_terminate_backend's, any
//     other MySQL error such as KILL CONNECTION's, an
//     *redisoutbox.ExecError): the outcome is unknown; the same entry is
//     retried until a retry is confirmed, which records the append line.
//
// Just before each entry's first commit (after AppendInTx succeeded) the
// appender writes an unknown line for it, its intent. The checker lets an
// append line win over an unknown one, so a confirmed entry reads as
// appended; an entry that never got confirmed (its commit failed and the
// appender stopped before a retry succeeded, or the appender was killed
// between its commit and its append line) reads as unknown: never lost,
// allowed to be delivered, order-checked if delivered. Without the intent
// line a SIGKILL right after a commit would leave a committed entry the
// history does not know, which the checker reports as unexpected. Every
// line is flushed as it is written, so a killed appender leaves whole
// lines (a kill can only lose the append line of the last commit, which
// its intent line covers).
//
// With -stamp-header NAME, every attempt's entry carries the header NAME,
// the attempt's time in Unix nanoseconds, set just before the store is
// asked (before Begin on Postgres, before the pipeline on Redis): the soak
// run measures commit-to-publish latency from it. An attempt whose commit
// was unknown and did land keeps its own stamp (a retry of an ID already
// there is a no-op).
//
// # Idempotent retries
//
// A retry after an unknown commit appends the same ID again. Every backend
// skips an ID that is still in the outbox: Postgres inserts with ON
// CONFLICT (id) DO NOTHING, MySQL with ON DUPLICATE KEY UPDATE id = id on
// the table's unique id, Redis's append.lua adds the entry with HSETNX
// on the partition's entries hash (idempotency is per partition; an
// entry's partition follows from its key, which a retry keeps). The retry
// then commits nothing new and is confirmed. If the first copy had already
// been relayed and deleted (MarkSent deletes sent entries; Postgres's
// Options.Archive moves them out of the outbox table, which is the same
// here), the retry appends the ID anew and it is published again: a
// duplicate delivery, never a loss. The checker counts it as a duplicate
// and attributes it to the fault before it.
//
// # Shutdown
//
// When the context ends, the appender starts nothing new. A commit in
// flight is given up to -timeout to finish (its context is not the one
// that ended), so a graceful stop leaves no unknown entries unless a
// commit failed; an entry whose commit outcome stayed unknown stays an
// unknown line, one with only pre-commit failures leaves no line. Then the
// history is closed and a summary goes to stderr.
//
// # Logs
//
// Errors go to stderr with a timestamp, at most one line per second per
// kind (begin, append, commit, exec, ...); the lines left out are counted
// in the next line of the kind and in the summary.
package appender
