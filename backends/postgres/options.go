package pgoutbox

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
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
)

// Options configure a [Backend] and [Migrate]. The zero value is valid:
// table "public"."outbox", one partition, sent entries deleted.
type Options struct {
	// Schema holds the tables. Default "public" (DefaultSchema), the
	// schema the migration files land in when run by goose or
	// golang-migrate with the default search_path.
	Schema string
	// Table is the outbox table's name; the lease, archive and migration
	// tables and the indexes are named after it ("<table>_lease",
	// "<table>_archive", "<table>_migrations"). Default "outbox"
	// (DefaultTable). At most 48 bytes.
	Table string
	// Partitions is the number of partitions (see outbox.Store). Every
	// appender and relay of one outbox must use the same value. Default 1.
	Partitions int
	// Archive keeps sent entries in "<table>_archive" (with their sent
	// time) instead of deleting them; [Backend.PurgeArchive] deletes old
	// ones. Archived entries are sent, so appending an archived ID again
	// appends a new entry; when that one is sent, its archive row replaces
	// the earlier one. Default false: MarkSent deletes.
	Archive bool
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
}

// withDefaults validates o and fills in the defaults, in one place.
func (o Options) withDefaults() (Options, error) {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.Partitions == 0 {
		o.Partitions = 1
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
	switch {
	case o.Partitions < 0:
		return o, fmt.Errorf("pgoutbox: Options.Partitions is %d; use 1 or more (0 means 1)", o.Partitions)
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
	outbox, lease, archive, migrations string
}

func newNames(schema, table string) names {
	q := func(suffix string) string { return pgx.Identifier{schema, table + suffix}.Sanitize() }
	return names{outbox: q(""), lease: q("_lease"), archive: q("_archive"), migrations: q("_migrations")}
}

// Options returns the backend's options with the defaults filled in.
func (b *Backend) Options() Options { return b.opts }
