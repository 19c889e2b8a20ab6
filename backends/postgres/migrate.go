package pgoutbox

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
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrations holds the schema migrations as numbered files
// (NNN_name.up.sql, NNN_name.down.sql) at its root, ready for goose,
// golang-migrate or psql. The files use the default table name "outbox",
// unqualified, so they create the tables in the first schema of
// search_path. To use another Options.Table or Options.Schema with your
// own tool, run the SQL that [Migrate] runs instead (it renders the names)
// or set search_path and edit the names; [Migrate] needs neither.
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
			return nil, fmt.Errorf("pgoutbox: unexpected migration file %q", f.Name())
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

// quotedName matches the quoted identifiers of the migration files that
// derive from the default table name ("outbox", "outbox_lease", ...).
var quotedName = regexp.MustCompile(`"outbox((?:_[a-z0-9_]+)?)"`)

// renderMigration puts the configured table name into a migration file.
func renderMigration(sql, table string) string {
	return quotedName.ReplaceAllStringFunc(sql, func(m string) string {
		suffix := quotedName.FindStringSubmatch(m)[1]
		return pgx.Identifier{table + suffix}.Sanitize()
	})
}

// Migrate brings the outbox tables of opts.Schema and opts.Table to the
// newest version. It is [MigrateTo] with [LatestVersion].
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts Options) error {
	return MigrateTo(ctx, pool, opts, LatestVersion())
}

// MigrateTo applies up (or down) migrations until the schema is at version
// (0 removes every table). It creates opts.Schema if needed and records
// applied versions in "<table>_migrations". Everything runs in one
// transaction that first takes a transaction-scoped advisory lock
// (pg_advisory_xact_lock) on the schema, so concurrent callers (every
// replica of a service at start-up) serialize: the first migrates, the
// others find nothing left to do. It is safe behind PgBouncer in
// transaction pooling mode: no session state outlives the transaction.
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
	if version < 0 || version > ms[len(ms)-1].version {
		return fmt.Errorf("pgoutbox: Migrate: version %d is unknown; versions run from 0 to %d", version, ms[len(ms)-1].version)
	}
	n := newNames(opts.Schema, opts.Table)
	schema := pgx.Identifier{opts.Schema}.Sanitize()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1::bigint)", lockKey(opts.Schema)); err != nil {
			return err
		}
		stmts := []string{
			"CREATE SCHEMA IF NOT EXISTS " + schema,
			"SET LOCAL search_path TO " + schema,
			"CREATE TABLE IF NOT EXISTS " + n.migrations + ` (
				version    integer     PRIMARY KEY,
				name       text        NOT NULL,
				applied_at timestamptz NOT NULL DEFAULT now())`,
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		applied := map[int]bool{}
		rows, err := tx.Query(ctx, "SELECT version FROM "+n.migrations)
		if err != nil {
			return err
		}
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				return err
			}
			applied[v] = true
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, m := range ms { // up, oldest first
			if m.version > version || applied[m.version] {
				continue
			}
			if _, err := tx.Exec(ctx, renderMigration(m.up, opts.Table)); err != nil {
				return fmt.Errorf("migration %03d_%s up: %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+n.migrations+" (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
				return err
			}
		}
		for i := len(ms) - 1; i >= 0; i-- { // down, newest first
			m := ms[i]
			if m.version <= version || !applied[m.version] {
				continue
			}
			if _, err := tx.Exec(ctx, renderMigration(m.down, opts.Table)); err != nil {
				return fmt.Errorf("migration %03d_%s down: %w", m.version, m.name, err)
			}
			if _, err := tx.Exec(ctx, "DELETE FROM "+n.migrations+" WHERE version = $1", m.version); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgoutbox: Migrate %s to version %d: %w", n.outbox, version, err)
	}
	return nil
}

// lockKey is the advisory lock key of a schema's migrations.
func lockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("pgoutbox migrate " + strings.ToLower(schema)))
	return int64(h.Sum64())
}
