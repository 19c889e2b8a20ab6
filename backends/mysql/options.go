package mysqloutbox

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxrelay/outbox"
)

// DefaultTable is the outbox table's name when Options.Table is empty.
const DefaultTable = "outbox"

// maxTableLen leaves room for the longest derived name
// (Table+"_pause_topic") within MySQL's 64-character identifiers.
const maxTableLen = 48

// DefaultPollInterval is how often a relay polls a partition that had
// nothing due when nothing wakes it sooner (outbox.RelayOptions.PollInterval
// defaults to it for this backend; see docs/mysql.md, "Polling").
const DefaultPollInterval = 100 * time.Millisecond

// Options configure a [Backend] and [Migrate].
type Options struct {
	// Table names the outbox table in the connection's database; the
	// other tables are named after it (Table+"_lease", "_archive",
	// "_meta", "_hold", "_import", "_member", "_keyseq", "_pause_topic",
	// "_pause_part", "_migrations"). Default [DefaultTable]; at most 48 characters.
	Table string

	// Partitions is the partition count. [Migrate] creates the outbox
	// with it (and requires it); [New] with 0 reads the count stored with
	// the outbox, and with any other value refuses to open an outbox
	// stored with a different count.
	Partitions int

	// Archive keeps sent entries in Table+"_archive" (with their send
	// time) instead of deleting them; [Backend.PurgeArchive] removes old
	// ones.
	Archive bool

	// KeySequence numbers the entries of each non-empty key, 1, 2, 3, ...
	// in append order, in the [outbox.HeaderKeySeq] header, from a counter
	// per key that AppendInTx updates in the caller's transaction.
	KeySequence bool

	// Limits are rules checked at append (see [outbox.Limits]).
	Limits outbox.Limits

	// NoNotify turns off the in-process wake-ups of [Backend.Notify]:
	// Notifications then returns a channel that only closes.
	NoNotify bool

	// Logger receives the backend's rare warnings. Default slog.Default().
	Logger *slog.Logger

	// LongTransaction is the age from which [Backend.Health] reports an
	// open transaction of the server (any database's) with the warning
	// "long-transaction": InnoDB cannot purge row versions that a
	// transaction's read view may still need, so the outbox's deleted rows
	// pile up behind it. Default [DefaultLongTransaction]; negative turns
	// the check off.
	LongTransaction time.Duration

	// PurgeLag is the InnoDB history list length (undo logs of committed
	// transactions not yet purged) above which [Backend.Health] reports the
	// warning "purge-lag". Default [DefaultPurgeLag]; negative turns the
	// check off.
	PurgeLag int64
}

// DefaultLongTransaction is the default of Options.LongTransaction.
const DefaultLongTransaction = 5 * time.Minute

// DefaultPurgeLag is the default of Options.PurgeLag: a history list
// length of a million undo logs. While InnoDB's purge keeps up the length
// stays in the low thousands (at most 1,072 while a relay drained 200,000
// entries on MariaDB 10.11: docs/mysql.md, "Table size over time"), so a
// million is the purge held back, not busy.
const DefaultPurgeLag = 1_000_000

func (o Options) withDefaults() (Options, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.LongTransaction == 0 {
		o.LongTransaction = DefaultLongTransaction
	}
	if o.PurgeLag == 0 {
		o.PurgeLag = DefaultPurgeLag
	}
	switch {
	case o.Partitions < 0:
		return o, fmt.Errorf("mysqloutbox: Options.Partitions is %d; use 1 or more (or 0 to read the count stored with the outbox)", o.Partitions)
	case !validTable(o.Table):
		return o, fmt.Errorf("mysqloutbox: Options.Table %q is not a usable table name: use 1 to %d characters of UTF-8 without NUL, backquote or trailing space (derived names add up to 12 more)", o.Table, maxTableLen)
	}
	return o, nil
}

func validTable(s string) bool {
	return s != "" && utf8.RuneCountInString(s) <= maxTableLen && utf8.ValidString(s) &&
		!strings.ContainsAny(s, "\x00`") && !strings.HasSuffix(s, " ")
}

// names are the backquoted table names of one outbox.
type names struct {
	outbox, lease, archive, meta, member, keyseq, migrations string
	hold, importSeq, pauseTopic, pausePart                   string
}

func newNames(table string) names {
	q := func(suffix string) string { return "`" + table + suffix + "`" }
	return names{outbox: q(""), lease: q("_lease"), archive: q("_archive"), meta: q("_meta"),
		member: q("_member"), keyseq: q("_keyseq"), migrations: q("_migrations"),
		hold: q("_hold"), importSeq: q("_import"),
		pauseTopic: q("_pause_topic"), pausePart: q("_pause_part")}
}

// render replaces the table tokens of a query ({outbox}, {lease}, ...)
// with the backquoted names.
func (n names) render(q string) string {
	return strings.NewReplacer("{outbox}", n.outbox, "{lease}", n.lease, "{archive}", n.archive,
		"{meta}", n.meta, "{member}", n.member, "{keyseq}", n.keyseq, "{migrations}", n.migrations,
		"{hold}", n.hold, "{import}", n.importSeq,
		"{pause_topic}", n.pauseTopic, "{pause_part}", n.pausePart).Replace(q)
}

// Options returns the options b was made with, defaults filled in and
// Partitions set to the stored count.
func (b *Backend) Options() Options { return b.opts }
