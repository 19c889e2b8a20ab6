package mysqlinbox

import (
	"database/sql"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/outboxrelay/outbox/inbox"
)

// DefaultTable is the inbox table's name when Options.Table is empty.
const DefaultTable = "inbox"

// maxTableLen leaves room for the longest derived name
// (Table+"_migrations") within MySQL's 64-character identifiers.
const maxTableLen = 48

// Options configure a [Store] and the migrations ([Migrate]).
type Options struct {
	// Table names the table of recorded IDs, in the connection's
	// database; the other tables are named after it: Table+"_keyseq" (the
	// keys' sequence numbers), Table+"_offsets" (the source partitions'
	// offsets) and Table+"_migrations" (the applied migrations). Default
	// [DefaultTable] ("inbox"); 1 to 48 characters of UTF-8 without NUL,
	// backquote or trailing space. Every Store and Migrate of one inbox
	// must use the same Table.
	Table string

	// Isolation is the isolation level of the transactions InTx begins
	// (and so of the handlers' effects): sql.LevelReadCommitted,
	// sql.LevelRepeatableRead or sql.LevelSerializable. Default
	// sql.LevelDefault: the session's (REPEATABLE READ unless the server
	// or the DSN says otherwise). The store is correct at each; READ
	// COMMITTED takes no gap locks, so two transactions that read keys
	// never seen before never wait for each other's gap (see the package
	// documentation, "Locks"). Transactions you begin yourself for
	// Inbox.Apply keep their own level.
	Isolation sql.IsolationLevel
}

// withDefaults applies the defaults and checks the options, in one place.
func (o Options) withDefaults() (Options, error) {
	if o.Table == "" {
		o.Table = DefaultTable
	}
	if !validTable(o.Table) {
		return o, fmt.Errorf("mysqlinbox: Options.Table %q is not a usable table name: use 1 to %d characters of UTF-8 without NUL, backquote or trailing space (the derived names add up to 11 more): %w",
			o.Table, maxTableLen, inbox.ErrInvalidArgument)
	}
	switch o.Isolation {
	case sql.LevelDefault, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable:
	default:
		return o, fmt.Errorf("mysqlinbox: Options.Isolation %v is not supported; use sql.LevelDefault, LevelReadCommitted, LevelRepeatableRead or LevelSerializable: %w", o.Isolation, inbox.ErrInvalidArgument)
	}
	return o, nil
}

func validTable(s string) bool {
	return s != "" && utf8.RuneCountInString(s) <= maxTableLen && utf8.ValidString(s) &&
		!strings.ContainsAny(s, "\x00`") && !strings.HasSuffix(s, " ")
}

// names are the backquoted names of an inbox's tables and procedures.
type names struct {
	table                              string // unquoted, as configured
	inbox, keyseq, offsets, migrations string
	recordKeys, finish                 string // the procedures of migration 002
}

func newNames(table string) names {
	q := func(suffix string) string { return "`" + table + suffix + "`" }
	return names{table: table, inbox: q(""), keyseq: q("_keyseq"), offsets: q("_offsets"), migrations: q("_migrations"),
		recordKeys: q("_record_keys"), finish: q("_finish")}
}
