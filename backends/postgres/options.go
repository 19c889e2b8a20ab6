package pgoutbox

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox"
)

// Default option values.
const (
	// DefaultSchema is the schema used when Options.Schema is empty.
	DefaultSchema = "public"
	// DefaultTable is the table name used when Options.Table is empty.
	DefaultTable = "outbox"
	// maxTableLen leaves room for the longest derived name
	// ("<table>_holdback_idx") within PostgreSQL's 63-byte identifiers.
	maxTableLen = 48
	// maxIdentLen is PostgreSQL's identifier limit (NAMEDATALEN - 1).
	maxIdentLen = 63
	// DefaultNotifyInterval is used when Options.NotifyInterval is 0.
	DefaultNotifyInterval = 2 * time.Millisecond
	// DefaultXminHorizonWarning is used when Options.XminHorizonWarning
	// is 0.
	DefaultXminHorizonWarning = 5 * time.Minute
	// DefaultArchiveLockTimeout is used when Options.ArchiveLockTimeout
	// is 0.
	DefaultArchiveLockTimeout = 200 * time.Millisecond
)

// Options configure a [Backend] and [Migrate]. The zero value is valid for
// [New] (table "public"."outbox", the partition count stored with it, sent
// entries deleted); [Migrate] also needs Partitions to create an outbox.
type Options struct {
	// Schema holds the tables. Default "public" (DefaultSchema), the
	// schema the migration files land in when run by goose or
	// golang-migrate with the default search_path.
	Schema string
	// Table is the outbox table's name; the other tables and the indexes
	// are named after it ("<table>_lease", "<table>_archive",
	// "<table>_meta", "<table>_member", "<table>_keyseq", "<table>_hold",
	// "<table>_pause_topic", "<table>_pause_part", "<table>_migrations"). Default
	// "outbox" (DefaultTable). At most 48 bytes.
	Table string
	// Partitions is the number of partitions (see outbox.Store). It is
	// stored with the outbox, in "<table>_meta", when [Migrate] creates it
	// (migration 004), and fixed from then on.
	//
	// For [Migrate] it is the count to create the outbox with: required
	// (1 or more) when Migrate applies migration 004, that is when it
	// creates the outbox or brings one from before 004 up to date (then it
	// must be the count the outbox's appenders and relays have been
	// using). On an outbox that has its count, 0 checks nothing and any
	// other value must equal the stored count.
	//
	// For [New], 0 (the default) means the stored count; any other value
	// must equal it. A count that differs from the stored one fails with
	// an [*outbox.PartitionMismatchError]. Negative values are rejected.
	Partitions int
	// Archive keeps sent entries in "<table>_archive" (with their sent
	// time) instead of deleting them; [Backend.PurgeArchive] and the
	// relay's retention ([outbox.ArchiveJanitor]) delete old ones.
	// Archived entries are sent, so appending an archived ID again appends
	// a new entry; when that one is sent, its archive row replaces the
	// earlier one in a plain archive, and is added next to it in a
	// partitioned archive (see ArchivePartitioned). Default false:
	// MarkSent deletes.
	Archive bool
	// ArchivePartitioned is read by [Migrate] and [MigrateTo] only: with
	// it, the archive "<table>_archive" is made a table partitioned by
	// range of sent_at, one partition per UTC day
	// ("<table>_archive_pYYYYMMDD", created [ArchiveDaysAhead] days ahead)
	// and a DEFAULT partition ("<table>_archive_default") for rows of a
	// day without one. An empty plain archive is replaced; one with rows
	// is converted as [PartitionArchive] does. Retention then drops whole
	// days instead of deleting rows. [New] finds out by itself whether the
	// archive is partitioned; this field changes nothing there. Default
	// false: Migrate leaves the archive as it is (a plain table when it
	// creates it). See docs/postgres.md, "Retention and the partitioned
	// archive".
	ArchivePartitioned bool
	// ArchiveLockTimeout bounds how long a retention call
	// ([Backend.PurgeArchiveBatch], [Backend.MaintainArchive],
	// [Backend.PurgeParked]) and [PartitionArchive] wait for a lock (SET
	// LOCAL lock_timeout): creating or dropping a partition of a
	// partitioned archive takes an ACCESS EXCLUSIVE lock on the archive,
	// and MarkSent of an archiving relay waits behind it for at most this
	// long (plus the moment the lock is then held, a catalogue change). A call that cannot have its lock in time fails with an error
	// wrapping [ErrArchiveLockTimeout] and changes nothing. Default
	// [DefaultArchiveLockTimeout]; it is rounded up to whole milliseconds.
	ArchiveLockTimeout time.Duration
	// Channel is the LISTEN/NOTIFY channel appends notify and
	// [Backend.Notifications] listens on. Default "<schema>.<table>".
	// At most 63 bytes.
	Channel string
	// ListenConfig is the connection configuration of the dedicated
	// LISTEN connection. Default: a copy of the pool's connection config.
	// Behind PgBouncer in transaction pooling mode, point it at PostgreSQL
	// directly (or at a session-pooling PgBouncer): LISTEN needs a session.
	ListenConfig *pgx.ConnConfig
	// Logger receives the listener's reconnect messages. Default
	// slog.Default().
	Logger *slog.Logger
	// NoNotify turns off the notifications appends send; relays then find
	// new entries by polling (outbox.RelayOptions.PollInterval) or through
	// [outbox.Relay.Notify] calls of your own. [Backend.Notifications]
	// still works: it receives what other appenders on the channel send.
	// Default false: appends notify, rate-limited by NotifyInterval.
	NoNotify bool
	// NotifyInterval is the shortest time between two appending
	// transactions of this Backend that notify in the transaction itself.
	// A NOTIFY makes PostgreSQL commit notifying transactions one at a
	// time, holding a cluster-wide lock through each commit's WAL flush,
	// so notifying in every transaction costs 30-40% of the append
	// throughput under concurrency. An append that skips its
	// in-transaction notification is covered by a trailing one: every
	// NotifyInterval (at most 100ms), on a connection of its own, the
	// Backend checks which of those transactions committed and sends one
	// NOTIFY for them; a rolled-back one causes none (see
	// docs/postgres.md, "Notifications"). Default 2ms
	// (DefaultNotifyInterval). A negative value notifies in every
	// appending transaction and never trails.
	NotifyInterval time.Duration
	// KeyLocks makes concurrent appends of one key commit, and therefore
	// deliver, in the order they appended. Without it, two transactions
	// that append the same key without otherwise serializing (such as by
	// updating the same row first) are delivered in commit order: the one
	// that commits first is delivered first even when it appended second.
	//
	// With KeyLocks, AppendInTx and AppendInSQLTx first take a
	// transaction-scoped advisory lock (pg_advisory_xact_lock) on a 64-bit
	// hash of each distinct non-empty key of the call (and the outbox's
	// schema and table), in sorted order, in one extra statement (one
	// extra round trip) before the insert. A second transaction appending
	// one of those keys waits at its append until the first commits or
	// rolls back. The locks are released at the end of the transaction, so
	// they are safe behind PgBouncer's transaction pooling. Two keys whose
	// hashes collide serialize each other's appends (harmless). A
	// transaction that appends in several calls takes the locks of each
	// call when it makes it: make such calls in a consistent key order, or
	// PostgreSQL may end one transaction with a deadlock error (40P01),
	// which the caller retries like any other. Default false.
	KeyLocks bool
	// Limits are rules checked at append (a payload size limit, a topic
	// rule; see [outbox.Limits]): an entry that breaks one is rejected
	// with an error wrapping [outbox.ErrInvalidEntry] and nothing of the
	// call is written. For Kafka, use kafkasink.Limits. Default: the zero
	// value, which checks nothing (an oversized payload or an illegal
	// topic then fails at publish and the entry is parked).
	Limits outbox.Limits
	// KeySequence numbers the entries of each non-empty key: AppendInTx
	// and AppendInSQLTx put the key's next number, 1, 2, 3, ..., as
	// decimal text into the entry's [outbox.HeaderKeySeq] header, which
	// the relay publishes with it (a Kafka record header).
	//
	// What is promised, per outbox and per key: the committed entries of
	// a key carry 1..N in append order, with no gap and no repeat. The
	// counter is a row of "<table>_keyseq" (migration 005) that the append
	// statement increments in the caller's transaction, so a rolled-back
	// transaction gives its numbers back, and an entry whose ID already
	// exists (an idempotent re-append) takes none. Entries with an empty
	// Key get no number and no header. Once committed, a number can go
	// missing only with its entry: a cancelled entry (Inspector.Cancel,
	// or a row deleted by hand) leaves a gap, which consumers see. A
	// requeued or retried entry keeps its number. An entry sent and then
	// appended again under the same ID is a new entry and takes a new
	// number.
	//
	// Costs and effects: the append statement also upserts one counter
	// row per distinct key of the call (no extra round trip), and the
	// row lock it takes serializes concurrent appends of one key until
	// the first appending transaction ends, which also makes them commit
	// and deliver in append order (what KeyLocks gives, without its extra
	// statement). Multi-key calls lock their keys in sorted order, but a
	// transaction that appends in several calls takes each call's locks
	// when it makes it: make such calls in a consistent key order, or
	// PostgreSQL may end one transaction with a deadlock error (40P01),
	// which the caller retries. Two transactions that append the same
	// new ID at once (a retry racing the original) no longer skip the
	// later one: its statement fails with a unique violation (23505) and
	// its transaction must be retried (the retry appends nothing for that
	// ID), because skipping it would leave a number unused. The counter
	// rows are never deleted (about 160 bytes, table and index, per key
	// of 20 bytes ever numbered). See docs/postgres.md, "Per-key sequence
	// numbers", for the measured cost (18-32% of the single-entry append
	// rate, 35-42% at 100 entries per transaction, and a hot key's
	// appends commit one at a time).
	//
	// An entry that sets the header itself is refused with an error
	// wrapping [outbox.ErrInvalidEntry]. Turn it on for every appender of
	// an outbox, or keys are numbered only by some of them. [New] checks
	// that the counter table exists. Default false: headers are stored as
	// given and the counter table is never touched.
	KeySequence bool
	// XminHorizonWarning is how long a transaction, a prepared
	// transaction or a replication slot may hold back the xmin horizon
	// (what vacuum may remove) before [Backend.Health] reports it with
	// the warning [WarnXminHorizonHeld]. Default 5 minutes
	// (DefaultXminHorizonWarning); a negative value looks for no holder.
	XminHorizonWarning time.Duration
}

// withDefaults validates o and fills in the defaults, in one place.
func (o Options) withDefaults() (Options, error) {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.Channel == "" {
		o.Channel = o.Schema + "." + o.Table
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.NotifyInterval == 0 {
		o.NotifyInterval = DefaultNotifyInterval
	}
	if o.XminHorizonWarning == 0 {
		o.XminHorizonWarning = DefaultXminHorizonWarning
	}
	if o.ArchiveLockTimeout == 0 {
		o.ArchiveLockTimeout = DefaultArchiveLockTimeout
	}
	switch {
	case o.ArchiveLockTimeout < 0:
		return o, fmt.Errorf("pgoutbox: Options.ArchiveLockTimeout is %v; use a positive duration (or 0 for the default, %v)", o.ArchiveLockTimeout, DefaultArchiveLockTimeout)
	case o.Partitions < 0:
		return o, fmt.Errorf("pgoutbox: Options.Partitions is %d; use 1 or more (or 0 to read the count stored with the outbox)", o.Partitions)
	case !validIdent(o.Schema, maxIdentLen):
		return o, fmt.Errorf("pgoutbox: Options.Schema %q is not a usable identifier: use 1 to %d bytes of UTF-8 without NUL", o.Schema, maxIdentLen)
	case !validIdent(o.Table, maxTableLen):
		return o, fmt.Errorf("pgoutbox: Options.Table %q is not a usable identifier: use 1 to %d bytes of UTF-8 without NUL (derived names add up to 15 bytes)", o.Table, maxTableLen)
	case !validIdent(o.Channel, maxIdentLen):
		return o, fmt.Errorf("pgoutbox: notification channel %q is longer than %d bytes or not valid UTF-8; set Options.Channel to a shorter name", o.Channel, maxIdentLen)
	}
	return o, nil
}

func validIdent(s string, maxLen int) bool {
	return s != "" && len(s) <= maxLen && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// names are the quoted, schema-qualified identifiers of one outbox.
type names struct {
	outbox, lease, archive, meta, member, keyseq, migrations string
	// hold, importSeq and sealFn are migration 006's hold table, import
	// sequence and seal function; sealTrigger is the bare name of the
	// trigger Seal creates on the outbox table.
	hold, importSeq, sealFn, sealTrigger string
	// exportIdx is the (partition, seq) index Seal builds for the export
	// (qualified, for DROP INDEX), exportIdxBare its bare name (CREATE
	// INDEX takes the table's schema).
	exportIdx, exportIdxBare string
	// pauseTopic and pausePart are migration 007's tables of paused
	// topics and partitions.
	pauseTopic, pausePart string
}

func newNames(schema, table string) names {
	q := func(suffix string) string { return pgx.Identifier{schema, table + suffix}.Sanitize() }
	return names{outbox: q(""), lease: q("_lease"), archive: q("_archive"), meta: q("_meta"), member: q("_member"), keyseq: q("_keyseq"), migrations: q("_migrations"),
		hold: q("_hold"), importSeq: q("_import_seq"), sealFn: q("_seal"), sealTrigger: pgx.Identifier{table + "_sealed"}.Sanitize(),
		exportIdx: q("_export_idx"), exportIdxBare: pgx.Identifier{table + "_export_idx"}.Sanitize(),
		pauseTopic: q("_pause_topic"), pausePart: q("_pause_part")}
}

// Options returns the backend's options with the defaults filled in.
func (b *Backend) Options() Options { return b.opts }
