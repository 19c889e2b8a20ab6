package pginbox

import (
	"embed"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Default option values.
const (
	// DefaultSchema is the schema used when Options.Schema is empty.
	DefaultSchema = "public"
	// DefaultTable is the table name used when Options.Table is empty.
	DefaultTable = "inbox"
	// maxTableLen leaves room for the longest derived name
	// ("<table>_keyseq_updated_at_idx", 22 bytes more) within
	// PostgreSQL's 63-byte identifiers.
	maxTableLen = 41
	// maxIdentLen is PostgreSQL's identifier limit (NAMEDATALEN - 1).
	maxIdentLen = 63
)

// Options name an inbox's tables, for [New], [NewSQL], [Migrate],
// [MigrateDown] and [MigrationSQL]. The zero value is valid: the tables
// "public"."inbox", "public"."inbox_keyseq", "public"."inbox_offsets" and
// "public"."inbox_migrations".
type Options struct {
	// Schema holds the tables. Default "public" (DefaultSchema), the
	// schema the migration files land in when run by goose or
	// golang-migrate with the default search_path. At most 63 bytes.
	Schema string
	// Table is the table of applied message IDs; the others are named
	// after it: "<table>_keyseq" (each key's highest applied sequence
	// number), "<table>_offsets" (each source partition's next offset)
	// and "<table>_migrations" (applied migration versions), and the
	// indexes "<table>_applied_at_idx" and "<table>_keyseq_updated_at_idx".
	// Default "inbox" (DefaultTable). At most 41 bytes, so that the
	// derived names fit PostgreSQL's 63.
	Table string
}

// withDefaults applies the defaults and checks the names: the one place
// options are validated.
func (o Options) withDefaults() (Options, error) {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	switch {
	case !validIdent(o.Schema, maxIdentLen):
		return o, fmt.Errorf("pginbox: Options.Schema %q is not a usable identifier: use 1 to %d bytes of UTF-8 without NUL", o.Schema, maxIdentLen)
	case !validIdent(o.Table, maxTableLen):
		return o, fmt.Errorf("pginbox: Options.Table %q is not a usable identifier: use 1 to %d bytes of UTF-8 without NUL (derived names add up to 22 bytes)", o.Table, maxTableLen)
	}
	return o, nil
}

func validIdent(s string, maxLen int) bool {
	return s != "" && len(s) <= maxLen && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// names are the quoted, schema-qualified identifiers of one inbox.
type names struct {
	inbox, keyseq, offsets, migrations string
}

func newNames(o Options) names {
	q := func(suffix string) string { return pgx.Identifier{o.Schema, o.Table + suffix}.Sanitize() }
	return names{inbox: q(""), keyseq: q("_keyseq"), offsets: q("_offsets"), migrations: q("_migrations")}
}

// quotedName matches the quoted identifiers of the embedded SQL files
// that derive from the default table name ("inbox", "inbox_keyseq",
// "inbox_pkey", ...), with the DROP INDEX before an index's name.
var quotedName = regexp.MustCompile(`(DROP INDEX (?:IF EXISTS )?)?"inbox((?:_[a-z0-9_]+)?)"`)

// tableSuffixes are the suffixes of the quoted names that name tables
// (the others name indexes and constraints, which cannot be
// schema-qualified when created).
var tableSuffixes = map[string]bool{"": true, "_keyseq": true, "_offsets": true, "_migrations": true}

// render puts the configured names into an embedded SQL file: tables (and
// indexes dropped) as "schema"."table", indexes and constraints created
// under their bare name (they land in their table's schema).
func render(sql string, o Options) string {
	return quotedName.ReplaceAllStringFunc(sql, func(m string) string {
		sm := quotedName.FindStringSubmatch(m)
		drop, suffix := sm[1], sm[2]
		if drop != "" || tableSuffixes[suffix] {
			return drop + pgx.Identifier{o.Schema, o.Table + suffix}.Sanitize()
		}
		return pgx.Identifier{o.Table + suffix}.Sanitize()
	})
}

//go:embed queries/*.sql
var queryFS embed.FS

// queries are the statements of one inbox, rendered for its Options, one
// per Store method (queries/<method>.sql).
type queries struct {
	record, keySeqs, setKeySeqs, saveOffsets, offsets, purge string
	// oldest serves the optional inbox.OldestReporter.
	oldest string
	// recordWithKeySeqs and finish serve the optional interfaces
	// (RecordWithKeySeqs, Finish): two methods' statements in one.
	recordWithKeySeqs, finish string
	// recordOne and recordOneWithKeySeq are record and recordWithKeySeqs
	// for one ID (and at most one key): what Handle sends.
	recordOne, recordOneWithKeySeq string
}

// recordArgs picks the Record statement for ids: the one-ID form for a
// single ID. arg converts a []string for the driver.
func (q queries) recordArgs(ids []string, arg func([]string) any) (string, []any) {
	if len(ids) == 1 {
		return q.recordOne, []any{ids[0]}
	}
	return q.record, []any{arg(ids)}
}

// recordWithKeySeqsArgs picks the RecordWithKeySeqs statement: the
// one-ID, one-key form for a single ID and a single key.
func (q queries) recordWithKeySeqsArgs(ids, keys []string, arg func([]string) any) (string, []any) {
	if len(ids) == 1 && len(keys) == 1 {
		return q.recordOneWithKeySeq, []any{ids[0], keys[0]}
	}
	return q.recordWithKeySeqs, []any{arg(ids), arg(keys)}
}

func newQueries(o Options) queries {
	q := func(name string) string {
		b, err := queryFS.ReadFile("queries/" + name + ".sql")
		if err != nil {
			panic("pginbox: embedded query " + name + " is missing: " + err.Error())
		}
		return render(string(b), o)
	}
	return queries{
		record:      q("record"),
		keySeqs:     q("key_seqs"),
		setKeySeqs:  q("set_key_seqs"),
		saveOffsets: q("save_offsets"),
		offsets:     q("offsets"),
		purge:       q("purge"),
		oldest:      q("oldest"),

		recordWithKeySeqs: q("record_with_key_seqs"),
		finish:            q("finish"),

		recordOne:           q("record_one"),
		recordOneWithKeySeq: q("record_one_with_key_seq"),
	}
}
