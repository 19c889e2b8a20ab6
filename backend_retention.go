package outbox

import (
	"context"
	"time"
)

// The optional interfaces of the SPI for what outlives the drain: the
// archive of sent entries, parked entries, and the health of the store's
// tables or memory. The relay runs them (see RelayOptions.ArchiveRetention,
// RelayOptions.ParkedRetention and RelayOptions.HealthInterval); the CLI's
// status command reads [HealthChecker].

// ArchiveJanitor is an optional interface of a [Store] that keeps sent
// entries in an archive (pgoutbox and mysqloutbox with Options.Archive).
// The relay that holds partition 0's lease calls it, one relay of a fleet
// at a time, every RelayOptions.RetentionInterval: MaintainArchive first,
// then PurgeArchiveBatch until it reports no more, pausing between calls
// (see RelayOptions.ArchiveRetention). Calls may still overlap for a
// moment when partition 0's lease passes from one relay to another, so
// each call must be safe next to another (it is: a row is removed once,
// and a removal skips the rows another holds).
type ArchiveJanitor interface {
	// MaintainArchive prepares the archive for the entries to come: a
	// store whose archive is partitioned by time creates the partitions
	// the next days need (see the store's documentation for how far
	// ahead). It is called every round, also without a retention, and
	// returns at once when there is nothing to do. A plain archive does
	// nothing.
	MaintainArchive(ctx context.Context, now time.Time) error

	// PurgeArchiveBatch removes archived entries sent before before,
	// oldest first, in one short transaction: at most limit rows of a
	// plain archive, or one whole partition older than before from an
	// archive partitioned by time (removed then counts its rows). A store
	// may keep the rows of a partition that also holds newer entries until
	// the whole partition is older than before; its documentation says how
	// much longer that keeps them (pgoutbox: up to one day). It takes no
	// lock it has to wait for longer than the store's documented bound
	// (rows others hold are skipped and removed by a later call), so it
	// never stalls appends or the drain.
	// more reports that entries sent before before remain, as far as the
	// call could tell: the relay calls again after a pause while more is
	// true. It returns (0, false, nil) on an empty archive.
	PurgeArchiveBatch(ctx context.Context, before time.Time, limit int) (removed int64, more bool, err error)

	// OldestArchived reports when the oldest entry in the archive was
	// sent; ok is false when the archive is empty.
	OldestArchived(ctx context.Context) (sent time.Time, ok bool, err error)
}

// ParkedPurger is an optional interface of a [Store] that can remove parked
// entries for good. Nothing calls it unless asked to by name:
// RelayOptions.ParkedRetention (the CLI's --parked-retention) makes the
// relay that holds partition 0's lease call it, logging every removal at
// WARN with the entries' IDs, since a parked entry was never delivered.
type ParkedPurger interface {
	// PurgeParked removes, in one short transaction (or script), at most
	// limit entries that were parked before before, oldest park first, and
	// returns their IDs. An entry's park time is when it was parked (the
	// failed attempt that parked it, or the store's park of an entry it
	// could not decode); a requeued entry is no longer parked, and its park
	// time starts over when it is parked again. more reports that entries
	// parked before before remain, as far as the call could tell. Entries
	// that are not parked are never removed.
	PurgeParked(ctx context.Context, before time.Time, limit int) (ids []string, more bool, err error)
}

// HealthChecker is an optional interface of a [Store] that can tell
// whether the store keeps itself clean: the size and dead rows of its
// tables, its memory, and the conditions under which they grow without
// bound (PostgreSQL's autovacuum switched off for the server or the table,
// an old transaction that holds back every vacuum; Redis's memory
// fragmentation). The relay calls it every RelayOptions.HealthInterval,
// logs each warning once at WARN when it first appears (and at INFO when it
// is gone), and exports the figures as metrics; `outbox status` prints
// them.
type HealthChecker interface {
	// Health reads the store's figures and warnings. It changes nothing
	// and reads only the store's catalogue and statistics, so it is cheap
	// enough to call every few seconds.
	Health(ctx context.Context) (Health, error)
}

// Health is what [HealthChecker.Health] reports.
type Health struct {
	// Tables are the store's tables that grow and shrink with the drain
	// (the outbox table, its archive), for SQL stores.
	Tables []TableHealth
	// Memory is the server's memory, for stores that keep the outbox in
	// memory (Redis); nil for the others.
	Memory *MemoryHealth
	// Warnings are the conditions that keep the store from cleaning up
	// after itself, each with its fix; empty when there is none.
	Warnings []HealthWarning
}

// TableHealth is one table's figures in [Health].
type TableHealth struct {
	// Name is the table's name as the store addresses it (schema
	// qualified where the store has schemas).
	Name string
	// Bytes is the table's size with its indexes (and TOAST), in bytes.
	Bytes int64
	// LiveRows and DeadRows are the store's estimates of the live rows and
	// of the dead ones (row versions deleted or updated and not yet
	// reclaimed by vacuum); -1 when the store cannot tell.
	LiveRows, DeadRows int64
	// LastVacuum is when the table was last vacuumed (by autovacuum or by
	// hand), zero when never or when the store cannot tell.
	LastVacuum time.Time
	// Vacuums counts the vacuums of the table (autovacuum and by hand)
	// since the server's statistics were reset; -1 when the store cannot
	// tell.
	Vacuums int64
}

// MemoryHealth is the server's memory in [Health].
type MemoryHealth struct {
	// UsedBytes is the memory the server's allocator holds for data
	// (Redis used_memory).
	UsedBytes int64
	// RSSBytes is the server process's resident memory (Redis
	// used_memory_rss).
	RSSBytes int64
	// Fragmentation is RSSBytes over UsedBytes (Redis
	// mem_fragmentation_ratio).
	Fragmentation float64
}

// HealthWarning is one condition in [Health.Warnings].
type HealthWarning struct {
	// Code names the condition, stable across calls, for example
	// "autovacuum-off", "table-autovacuum-disabled", "xmin-horizon-held"
	// or "memory-fragmentation". The relay logs a warning once per code
	// and object until it is gone.
	Code string
	// Object is what the condition is about (a table, a server), "" when
	// it is about the whole store.
	Object string
	// Message says what is wrong, what it costs (with the figures) and
	// how to fix it, in one or two sentences.
	Message string
}
