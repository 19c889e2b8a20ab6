package pginbox

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrations holds the schema migrations as numbered files
// (NNN_name.up.sql, NNN_name.down.sql) at its root, in the layout
// golang-migrate reads and with the names goose's SQL files use: run them
// with such a tool instead of [Migrate] if you prefer. The files use the
// default table name "inbox", unqualified, so they create the tables in
// the first schema of search_path. For another Options.Table or
// Options.Schema, run the SQL [MigrationSQL] returns instead (it renders
// the names), or set search_path.
var Migrations fs.FS = mustSub(migrationFS, "migrations")

func mustSub(f fs.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return s
}

type migration struct {
	version  int
	name     string
	up, down string
}

var migrationName = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.(up|down)\.sql$`)

// loadMigrations reads and orders the embedded migrations.
func loadMigrations() ([]migration, error) {
	files, err := fs.ReadDir(Migrations, ".")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*migration{}
	for _, f := range files {
		m := migrationName.FindStringSubmatch(f.Name())
		if m == nil {
			return nil, fmt.Errorf("pginbox: unexpected migration file %q", f.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(Migrations, f.Name())
		if err != nil {
			return nil, err
		}
		mg := byVersion[v]
		if mg == nil {
			mg = &migration{version: v, name: m[2]}
			byVersion[v] = mg
		}
		if m[3] == "up" {
			mg.up = string(body)
		} else {
			mg.down = string(body)
		}
	}
	out := make([]migration, 0, len(byVersion))
	for _, m := range byVersion {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// LatestVersion is the version of the newest embedded migration.
func LatestVersion() int {
	ms, err := loadMigrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// createMigrationsTable creates the table recording applied versions (the
// same shape as pgoutbox's); %s is its qualified name.
const createMigrationsTable = `CREATE TABLE IF NOT EXISTS %s (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())`

// MigrationSQL returns the SQL of every up migration, rendered for opts
// as [Migrate] runs it on an empty schema: it creates opts.Schema if
// needed, the tables with names derived from opts.Table (schema-qualified,
// so it does not depend on search_path) and records the versions in
// "<table>_migrations", so a later Migrate finds them applied. Run it in
// one transaction (psql --single-transaction, or as one migration of your
// own tool). It does not touch a database; its only error is an invalid
// opts.
func MigrationSQL(opts Options) (string, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return "", err
	}
	ms, err := loadMigrations()
	if err != nil {
		return "", err
	}
	n := newNames(opts)
	var sb strings.Builder
	fmt.Fprintf(&sb, "-- pginbox migrations 001 to %03d for the inbox %s, rendered by pginbox.MigrationSQL.\n"+
		"-- Tables are schema-qualified (%s), so the SQL does not depend on search_path;\n"+
		"-- indexes and constraints are created in their table's schema. Run in one transaction.\n\n",
		ms[len(ms)-1].version, n.inbox, pgx.Identifier{opts.Schema}.Sanitize())
	fmt.Fprintf(&sb, "CREATE SCHEMA IF NOT EXISTS %s;\n\n", pgx.Identifier{opts.Schema}.Sanitize())
	fmt.Fprintf(&sb, createMigrationsTable+";\n", n.migrations)
	for _, m := range ms {
		fmt.Fprintf(&sb, "\n%s\n", strings.TrimRight(render(fileOnlyNotes.ReplaceAllString(m.up, ""), opts), "\n"))
		fmt.Fprintf(&sb, "\nINSERT INTO %s (version, name) VALUES (%d, '%s');\n", n.migrations, m.version, m.name)
	}
	return sb.String(), nil
}

// fileOnlyNotes matches the comment paragraph of the migration files that
// speaks of the files as they are (unqualified names): MigrationSQL leaves
// it out, since its output has the names qualified.
var fileOnlyNotes = regexp.MustCompile(`(?m)^--\n-- Names are unqualified[^\n]*\n(?:-- [^\n]*\n)*`)

// Migrate brings the inbox tables of opts.Schema and opts.Table to the
// newest version ([LatestVersion]), creating opts.Schema if needed (marked
// with the comment [SchemaMark]) and recording applied versions in
// "<table>_migrations". It is idempotent: on an inbox that is up to date
// it changes nothing.
//
// Everything runs in one transaction that first takes a
// transaction-scoped advisory lock (pg_advisory_xact_lock) on the schema,
// the same lock pgoutbox.Migrate takes, so concurrent callers (every
// replica of a service at start-up, and an outbox migrating into the same
// schema) serialize: the first migrates, the others find nothing left to
// do. No session state outlives the transaction, so it is safe behind
// PgBouncer in transaction pooling mode. Errors name the inbox and the
// migration that failed; nothing of a failed run stays.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	return migrateTo(ctx, pool, opts, LatestVersion())
}

// MigrateDown reverts every applied migration of the inbox, newest first,
// which drops its tables and everything in them (the applied IDs, the key
// sequence numbers, the stored offsets), then "<table>_migrations", then
// opts.Schema when Migrate (or pgoutbox.Migrate) created it and it is
// empty; a schema that holds anything else is left as it is. On an inbox
// that does not exist it only drops such a schema (one the inbox created
// and an outbox shared, say, once the outbox is gone). It serializes with Migrate through
// the same lock and runs in one transaction.
func MigrateDown(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	return migrateTo(ctx, pool, opts, 0)
}

// SchemaMark is the comment [Migrate] puts on a schema it creates, so that
// [MigrateDown] knows it may drop it (it also drops one carrying
// pgoutbox's mark, "created by pgoutbox.Migrate", when empty).
const SchemaMark = "created by pginbox.Migrate"

// pgoutboxSchemaMark is pgoutbox.SchemaMark.
const pgoutboxSchemaMark = "created by pgoutbox.Migrate"

func migrateTo(ctx context.Context, pool *pgxpool.Pool, opts Options, version int) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if pool == nil {
		return errors.New("pginbox: Migrate: pool is nil; pass a *pgxpool.Pool from pgxpool.New")
	}
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	n := newNames(opts)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		mg := migrator{tx: tx, opts: opts, n: n}
		applied, err := mg.begin(ctx, version > 0)
		if err != nil {
			return err
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
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			return ctxErr
		}
		return fmt.Errorf("pginbox: Migrate the inbox %s to version %d: %w", n.inbox, version, err)
	}
	return nil
}

// migrator runs the migrations of one migrateTo call in its transaction.
type migrator struct {
	tx   pgx.Tx
	opts Options
	n    names
}

// begin takes the schema's advisory lock and returns the versions
// applied. With create, it creates the schema (marked with SchemaMark)
// and the migrations table if needed; without, it returns none when there
// is no migrations table (nothing to revert).
func (mg migrator) begin(ctx context.Context, create bool) (map[int]bool, error) {
	if _, err := mg.tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", lockKey(mg.opts.Schema)); err != nil {
		return nil, err
	}
	if create {
		if err := mg.createSchema(ctx); err != nil {
			return nil, err
		}
	} else {
		var exists bool
		if err := mg.tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", mg.n.migrations).Scan(&exists); err != nil || !exists {
			return map[int]bool{}, err
		}
	}
	applied := map[int]bool{}
	rows, err := mg.tx.Query(ctx, "SELECT version FROM "+mg.n.migrations)
	if err != nil {
		return nil, err
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, err
	}
	for _, v := range versions {
		applied[v] = true
	}
	return applied, nil
}

// createSchema creates the schema (marked) when it does not exist, and the
// migrations table.
func (mg migrator) createSchema(ctx context.Context) error {
	schema := pgx.Identifier{mg.opts.Schema}.Sanitize()
	var exists bool
	if err := mg.tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", mg.opts.Schema).Scan(&exists); err != nil {
		return err
	}
	stmts := []string{fmt.Sprintf(createMigrationsTable, mg.n.migrations)}
	if !exists {
		stmts = append([]string{"CREATE SCHEMA " + schema, "COMMENT ON SCHEMA " + schema + " IS '" + SchemaMark + "'"}, stmts...)
	}
	for _, s := range stmts {
		if _, err := mg.tx.Exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// run applies, oldest first, the up migrations of ms up to version that
// are not applied, then reverts, newest first, the applied ones above
// version, recording each in the migrations table.
func (mg migrator) run(ctx context.Context, ms []migration, applied map[int]bool, version int) error {
	for _, m := range ms {
		if m.version > version || applied[m.version] {
			continue
		}
		if _, err := mg.tx.Exec(ctx, render(m.up, mg.opts)); err != nil {
			return fmt.Errorf("migration %03d_%s up: %w", m.version, m.name, err)
		}
		if _, err := mg.tx.Exec(ctx, "INSERT INTO "+mg.n.migrations+" (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
			return err
		}
	}
	for i := len(ms) - 1; i >= 0; i-- {
		m := ms[i]
		if m.version <= version || !applied[m.version] {
			continue
		}
		if _, err := mg.tx.Exec(ctx, render(m.down, mg.opts)); err != nil {
			return fmt.Errorf("migration %03d_%s down: %w", m.version, m.name, err)
		}
		if _, err := mg.tx.Exec(ctx, "DELETE FROM "+mg.n.migrations+" WHERE version = $1", m.version); err != nil {
			return err
		}
	}
	return nil
}

// removeAll drops the migrations table once every migration is reverted,
// then the schema when it carries SchemaMark (or pgoutbox's) and holds
// nothing else: a plain DROP SCHEMA, which refuses a schema that is not
// empty, run under a savepoint so that refusal keeps the schema and
// nothing else.
func (mg migrator) removeAll(ctx context.Context) error {
	if _, err := mg.tx.Exec(ctx, "DROP TABLE IF EXISTS "+mg.n.migrations); err != nil {
		return err
	}
	var mark *string
	err := mg.tx.QueryRow(ctx, "SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1", mg.opts.Schema).Scan(&mark)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (mark == nil || (*mark != SchemaMark && *mark != pgoutboxSchemaMark))) {
		return nil
	}
	if err != nil {
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

// lockKey is the advisory lock key of a schema's migrations: the key
// pgoutbox.Migrate uses, so outbox and inbox migrations of one schema
// serialize with each other too (both may create the schema).
func lockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("pgoutbox migrate " + strings.ToLower(schema)))
	return int64(h.Sum64())
}
