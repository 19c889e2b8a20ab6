package pgoutbox

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/sqlmigrate"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrations holds the schema migrations as numbered files
// (NNN_name.up.sql, NNN_name.down.sql) at its root, ready for goose,
// golang-migrate or psql. The files use the default table name "outbox",
// unqualified, so they create the tables in the first schema of
// search_path. Migration 004 holds a placeholder, {partitions}, for the
// partition count stored with the outbox: replace it with your count
// before running the file (unreplaced, it fails with a syntax error). To
// use another Options.Table or Options.Schema with your own tool, run the
// SQL that [MigrationSQL] returns instead (it renders the names and the
// count), or set search_path and edit the names; [Migrate] needs neither.
var Migrations fs.FS = sqlmigrate.Sub(migrationFS, "migrations")

type migration = sqlmigrate.Migration

// loadMigrations reads and orders the embedded migrations.
func loadMigrations() ([]migration, error) {
	return sqlmigrate.Load(Migrations, "pgoutbox")
}

// LatestVersion is the version of the newest embedded migration.
func LatestVersion() int {
	ms, err := loadMigrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// quotedName matches the quoted identifiers of the migration files that
// derive from the default table name ("outbox", "outbox_lease", ...),
// with the DROP INDEX before an index's name: an index is named bare in
// the files (found through search_path), so renderMigration qualifies the
// one a DROP INDEX names with the schema, as it does tables.
var quotedName = regexp.MustCompile(`(DROP INDEX (?:IF EXISTS )?)?"outbox((?:_[a-z0-9_]+)?)"`)

// tableSuffixes are the suffixes of the quoted names in the migration files
// that name tables, sequences and functions (the others name indexes,
// constraints and triggers, which cannot be schema-qualified).
var tableSuffixes = map[string]bool{"": true, "_lease": true, "_archive": true, "_meta": true, "_member": true, "_keyseq": true,
	"_hold": true, "_import_seq": true, "_seal": true, "_pause_topic": true, "_pause_part": true}

// partitionsPlaceholder stands for the partition count in migration 004.
const partitionsPlaceholder = "{partitions}"

// partitionsVersion is the migration that stores the partition count.
const partitionsVersion = 4

// renderMigration puts the configured names into a migration file: tables
// (and indexes dropped) as schema.table, indexes and constraints created
// as the bare name, and the
// partition count for its placeholder (in SQL, not in comments).
func renderMigration(sql string, opts Options) string {
	sql = quotedName.ReplaceAllStringFunc(sql, func(m string) string {
		sm := quotedName.FindStringSubmatch(m)
		drop, suffix := sm[1], sm[2]
		if drop != "" || tableSuffixes[suffix] {
			return drop + pgx.Identifier{opts.Schema, opts.Table + suffix}.Sanitize()
		}
		return pgx.Identifier{opts.Table + suffix}.Sanitize()
	})
	// The placeholder is replaced outside comments only: the header that
	// documents it keeps it.
	lines := strings.SplitAfter(sql, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			lines[i] = strings.ReplaceAll(l, partitionsPlaceholder, strconv.Itoa(opts.Partitions))
		}
	}
	return strings.Join(lines, "")
}

// fileOnlyNotes matches the comment paragraphs of the migration files
// that speak of the files as they are (unqualified names, the partition
// placeholder): MigrationSQL leaves them out, since its output has the
// names qualified and the count filled in.
var fileOnlyNotes = regexp.MustCompile(`(?m)^--\n-- (?:Names are unqualified|\{partitions\} below is a placeholder)[^\n]*\n(?:-- [^\n]*\n)*`)

// createMigrationsTable is the statement that creates the table recording
// applied versions; %s is its qualified name.
const createMigrationsTable = `CREATE TABLE IF NOT EXISTS %s (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())`

// errNoPartitions is the complaint about a missing Options.Partitions
// when the outbox is created.
func errNoPartitions(partitions int) error {
	return fmt.Errorf("Options.Partitions is %d, but migration %03d stores the partition count with the outbox: set it to the count to create the outbox with (1 or more; for an outbox created before that migration, the count its appenders and relays use)", partitions, partitionsVersion)
}

// MigrationSQL returns the SQL of every up migration, rendered for opts
// as [Migrate] would run it on an empty schema: it creates opts.Schema if
// needed, the tables with names derived from opts.Table (schema-qualified,
// so it does not depend on search_path), stores opts.Partitions (required,
// 1 or more) as the outbox's partition count, and records the versions in
// "<table>_migrations", so a later Migrate finds them applied. Run it in
// one transaction (psql --single-transaction, or as one migration of your
// own tool). It does not touch a database.
func MigrationSQL(opts Options) (string, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return "", err
	}
	if opts.Partitions < 1 {
		return "", fmt.Errorf("pgoutbox: MigrationSQL: %w", errNoPartitions(opts.Partitions))
	}
	if opts.ArchivePartitioned {
		return "", errors.New("pgoutbox: MigrationSQL: Options.ArchivePartitioned is for Migrate only (the partitions are named after the day they are made on); run the SQL without it, then pgoutbox.PartitionArchive (or \"outbox migrate up --archive-partitioned\")")
	}
	ms, err := loadMigrations()
	if err != nil {
		return "", err
	}
	n := newNames(opts.Schema, opts.Table)
	var sb strings.Builder
	fmt.Fprintf(&sb, "-- pgoutbox migrations 001 to %03d for %s with %d partitions, rendered by pgoutbox.MigrationSQL.\n"+
		"-- Tables, sequences and functions are schema-qualified (%s), so the SQL does not\n"+
		"-- depend on search_path; indexes and constraints are created in their table's schema.\n"+
		"-- The partition count is filled in. Run in one transaction.\n\n",
		ms[len(ms)-1].Version, n.outbox, opts.Partitions, pgx.Identifier{opts.Schema}.Sanitize())
	fmt.Fprintf(&sb, "CREATE SCHEMA IF NOT EXISTS %s;\n\n", pgx.Identifier{opts.Schema}.Sanitize())
	fmt.Fprintf(&sb, createMigrationsTable+";\n", n.migrations)
	for _, m := range ms {
		fmt.Fprintf(&sb, "\n%s\n", strings.TrimRight(renderMigration(fileOnlyNotes.ReplaceAllString(m.Up, ""), opts), "\n"))
		fmt.Fprintf(&sb, "\nINSERT INTO %s (version, name) VALUES (%d, '%s');\n", n.migrations, m.Version, m.Name)
	}
	return sb.String(), nil
}

// Migrate brings the outbox tables of opts.Schema and opts.Table to the
// newest version (and, with opts.ArchivePartitioned, makes the archive
// partitioned by day, see [PartitionArchive]). It is [MigrateTo] with [LatestVersion]: creating an
// outbox needs opts.Partitions (1 or more), which it stores.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	return MigrateTo(ctx, pool, opts, LatestVersion())
}

// MigrateTo applies up (or down) migrations until the schema is at version.
// It creates opts.Schema if needed (marking a schema it creates with a
// comment, [SchemaMark]) and records applied versions in
// "<table>_migrations".
//
// Version 0 removes every table of the outbox, "<table>_migrations"
// included, and then opts.Schema too, but only when MigrateTo created it
// (it carries SchemaMark) and it holds nothing else: a schema it did not
// create, or one that holds other objects (another outbox's tables, the
// application's), is left as it is; [SchemaState] tells which.
//
// Migration 004 stores opts.Partitions as the outbox's partition count, so
// applying it (creating an outbox, or bringing one from before 004 up to
// date) requires opts.Partitions of 1 or more. When the count is already
// stored, opts.Partitions 0 checks nothing, and any other value must equal
// the stored count, else MigrateTo changes nothing and returns an error
// wrapping an [*outbox.PartitionMismatchError]: running Migrate again with
// the same count is a no-op.
//
// With opts.ArchivePartitioned and a version of 2 (the archive's) or
// more, MigrateTo then calls [PartitionArchive], after that transaction:
// it makes a plain archive partitioned by day (a conversion that lets
// relays keep archiving), or adds the missing day partitions of one that
// is already. Going down keeps the archive partitioned (the down
// migrations that change it work on either form) until version 1, which
// drops it like a plain one; there is no way back to a plain archive but
// that.
//
// Everything else runs in one transaction that first takes a transaction-scoped
// advisory lock (pg_advisory_xact_lock) on the schema, so concurrent
// callers (every replica of a service at start-up) serialize: the first
// migrates, the others find nothing left to do. It is safe behind
// PgBouncer in transaction pooling mode: no session state outlives the
// transaction.
func MigrateTo(ctx context.Context, pool *pgxpool.Pool, opts Options, version int) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if pool == nil {
		return errors.New("pgoutbox: Migrate: pool is nil; pass a *pgxpool.Pool from pgxpool.New")
	}
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	if version < 0 || version > ms[len(ms)-1].Version {
		return fmt.Errorf("pgoutbox: Migrate: version %d is unknown; versions run from 0 to %d", version, ms[len(ms)-1].Version)
	}
	n := newNames(opts.Schema, opts.Table)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		mg := migrator{tx: tx, opts: opts, n: n}
		applied, err := mg.begin(ctx)
		if err != nil {
			return err
		}
		if version >= partitionsVersion {
			if err := checkStoredPartitions(ctx, tx, n, opts.Partitions, applied[partitionsVersion]); err != nil {
				return err
			}
		}
		if err := mg.run(ctx, ms, applied, version); err != nil {
			return err
		}
		if version == 0 {
			return mg.removeAll(ctx)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgoutbox: Migrate %s to version %d: %w", n.outbox, version, err)
	}
	if opts.ArchivePartitioned && version >= archiveVersion {
		return PartitionArchive(ctx, pool, opts)
	}
	return nil
}

// archiveVersion is the migration that creates the archive.
const archiveVersion = 2

// migrator runs the migrations of one MigrateTo call in its transaction.
type migrator struct {
	tx   pgx.Tx
	opts Options
	n    names
}

// SchemaMark is the comment MigrateTo puts on a schema it creates, so that
// MigrateTo to version 0 knows it may drop it.
const SchemaMark = "created by pgoutbox.Migrate"

// begin takes the schema's advisory lock, creates the schema (marked with
// SchemaMark) and the migrations table if needed, sets search_path to the
// schema for the transaction and returns the versions already applied.
func (mg migrator) begin(ctx context.Context) (map[int]bool, error) {
	if _, err := mg.tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", lockKey(mg.opts.Schema)); err != nil {
		return nil, err
	}
	schema := pgx.Identifier{mg.opts.Schema}.Sanitize()
	var exists bool
	if err := mg.tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", mg.opts.Schema).Scan(&exists); err != nil {
		return nil, err
	}
	if !exists {
		for _, s := range []string{"CREATE SCHEMA " + schema, "COMMENT ON SCHEMA " + schema + " IS '" + SchemaMark + "'"} {
			if _, err := mg.tx.Exec(ctx, s); err != nil {
				return nil, err
			}
		}
	}
	stmts := []string{
		"SET LOCAL search_path TO " + schema,
		fmt.Sprintf(createMigrationsTable, mg.n.migrations),
	}
	for _, s := range stmts {
		if _, err := mg.tx.Exec(ctx, s); err != nil {
			return nil, err
		}
	}
	applied := map[int]bool{}
	rows, err := mg.tx.Query(ctx, "SELECT version FROM "+mg.n.migrations)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return applied, nil
}

// run applies, oldest first, the up migrations of ms up to version that
// are not applied, then reverts, newest first, the applied ones above
// version, recording each in the migrations table.
func (mg migrator) run(ctx context.Context, ms []migration, applied map[int]bool, version int) error {
	for _, m := range ms { // up, oldest first
		if m.Version > version || applied[m.Version] {
			continue
		}
		if err := mg.up(ctx, m); err != nil {
			return err
		}
	}
	for i := len(ms) - 1; i >= 0; i-- { // down, newest first
		m := ms[i]
		if m.Version <= version || !applied[m.Version] {
			continue
		}
		if err := mg.down(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// removeAll drops the migrations table once every migration is reverted,
// then the schema when it carries SchemaMark and holds nothing else (a
// plain DROP SCHEMA, which refuses a schema that is not empty, run under
// a savepoint so that refusal keeps the schema and nothing else).
func (mg migrator) removeAll(ctx context.Context) error {
	if _, err := mg.tx.Exec(ctx, "DROP TABLE IF EXISTS "+mg.n.migrations); err != nil {
		return err
	}
	st, err := schemaState(ctx, mg.tx, mg.opts.Schema)
	if err != nil || !st.Marked {
		return err
	}
	sp, err := mg.tx.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := sp.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{mg.opts.Schema}.Sanitize()); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "2BP01" { // dependent_objects_still_exist: not empty
			return sp.Rollback(ctx)
		}
		return err
	}
	return sp.Commit(ctx)
}

// SchemaInfo is what [SchemaState] reports of a schema.
type SchemaInfo struct {
	// Exists reports whether the schema exists.
	Exists bool
	// Marked reports whether it carries SchemaMark: MigrateTo created it.
	Marked bool
	// Objects is the number of relations (tables, sequences, views,
	// indexes, composite types), functions, and domain, enum and range
	// types in it.
	Objects int
}

// SchemaState reports whether schema exists, whether MigrateTo created it
// and how many objects it holds: after MigrateTo to version 0, why it kept
// the schema (not created by MigrateTo, or not empty).
func SchemaState(ctx context.Context, pool *pgxpool.Pool, schema string) (SchemaInfo, error) {
	return schemaState(ctx, pool, schema)
}

func schemaState(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema string) (SchemaInfo, error) {
	var st SchemaInfo
	var mark *string
	err := q.QueryRow(ctx, `SELECT obj_description(n.oid, 'pg_namespace'),
  (SELECT count(*) FROM pg_class WHERE relnamespace = n.oid)
  + (SELECT count(*) FROM pg_proc WHERE pronamespace = n.oid)
  + (SELECT count(*) FROM pg_type WHERE typnamespace = n.oid AND typtype IN ('d', 'e', 'r', 'm'))
FROM pg_namespace n WHERE nspname = $1`, schema).Scan(&mark, &st.Objects)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, nil
	}
	if err != nil {
		return st, err
	}
	st.Exists, st.Marked = true, mark != nil && *mark == SchemaMark
	return st, nil
}

// up applies migration m and records it as applied.
func (mg migrator) up(ctx context.Context, m migration) error {
	if _, err := mg.tx.Exec(ctx, renderMigration(m.Up, mg.opts)); err != nil {
		return fmt.Errorf("migration %03d_%s up: %w", m.Version, m.Name, err)
	}
	_, err := mg.tx.Exec(ctx, "INSERT INTO "+mg.n.migrations+" (version, name) VALUES ($1, $2)", m.Version, m.Name)
	return err
}

// down reverts migration m and deletes its record.
func (mg migrator) down(ctx context.Context, m migration) error {
	if _, err := mg.tx.Exec(ctx, renderMigration(m.Down, mg.opts)); err != nil {
		return fmt.Errorf("migration %03d_%s down: %w", m.Version, m.Name, err)
	}
	_, err := mg.tx.Exec(ctx, "DELETE FROM "+mg.n.migrations+" WHERE version = $1", m.Version)
	return err
}

// checkStoredPartitions checks configured against the partition count
// stored with the outbox (stored reports whether migration 004 is
// applied), before MigrateTo goes to a version that has it.
func checkStoredPartitions(ctx context.Context, tx pgx.Tx, n names, configured int, stored bool) error {
	if !stored {
		if configured < 1 {
			return errNoPartitions(configured)
		}
		return nil
	}
	if configured == 0 {
		return nil
	}
	var count int
	if err := tx.QueryRow(ctx, "SELECT partitions FROM "+n.meta).Scan(&count); err != nil {
		return fmt.Errorf("reading the stored partition count: %w", err)
	}
	if count != configured {
		return &outbox.PartitionMismatchError{Outbox: n.outbox, Configured: configured, Stored: count}
	}
	return nil
}

// lockKey is the advisory lock key of a schema's migrations.
func lockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("pgoutbox migrate " + strings.ToLower(schema)))
	return int64(h.Sum64())
}
