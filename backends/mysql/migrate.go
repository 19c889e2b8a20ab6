package mysqloutbox

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/internal/sqlmigrate"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrations holds the schema migrations as numbered files
// (NNN_name.up.sql, NNN_name.down.sql) at its root, for goose or
// golang-migrate. The files use the default table name "outbox" and hold
// two placeholders, {partitions} and {lease_rows}: run the SQL that
// [MigrationSQL] returns instead (it renders the names, the count and the
// lease rows); [Migrate] needs neither.
var Migrations fs.FS = sqlmigrate.Sub(migrationFS, "migrations")

type migration = sqlmigrate.Migration

// loadMigrations reads and orders the embedded migrations.
func loadMigrations() []migration {
	return sqlmigrate.MustLoad(Migrations, "mysqloutbox")
}

// LatestVersion is the version of the newest embedded migration.
func LatestVersion() int {
	ms := loadMigrations()
	return ms[len(ms)-1].Version
}

// quotedName matches the backquoted names of the migration files that
// derive from the default table name (`outbox`, `outbox_lease`, ...,
// `outbox_due_idx`).
var quotedName = regexp.MustCompile("`outbox((?:_[a-z0-9_]+)?)`")

// renderMigration puts the configured table name, the partition count and
// the lease rows into a migration file (into its SQL, not its comments).
func renderMigration(sqlText string, opts Options) string {
	var rows strings.Builder
	for p := range opts.Partitions {
		if p > 0 {
			rows.WriteString(",\n       ")
		}
		fmt.Fprintf(&rows, "(%d, '', 0, %s)", p, epochSQL)
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(sqlText, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
			continue
		}
		line = quotedName.ReplaceAllStringFunc(line, func(m string) string {
			return "`" + opts.Table + quotedName.FindStringSubmatch(m)[1] + "`"
		})
		line = strings.NewReplacer("{partitions}", strconv.Itoa(opts.Partitions), "{lease_rows}", rows.String()).Replace(line)
		b.WriteString(line)
	}
	return b.String()
}

func errNoPartitions(partitions int) error {
	return fmt.Errorf("creating an outbox needs its partition count: Options.Partitions is %d; set it to 1 or more (for example 16; with the CLI, --partitions N), and use the same count for every appender and relay", partitions)
}

// MigrationSQL returns every up migration, rendered with opts.Table and
// opts.Partitions (1 or more), for a migration tool of your own; run it in
// the outbox's database. [Migrate] runs the same statements.
func MigrationSQL(opts Options) (string, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return "", err
	}
	if opts.Partitions < 1 {
		return "", fmt.Errorf("mysqloutbox: MigrationSQL: %w", errNoPartitions(opts.Partitions))
	}
	var b strings.Builder
	for _, m := range loadMigrations() {
		fmt.Fprintf(&b, "-- %03d_%s\n%s\n", m.Version, m.Name, renderMigration(m.Up, opts))
	}
	return b.String(), nil
}

// Migrate brings the outbox tables of opts.Table to the newest version. It
// is [MigrateTo] with [LatestVersion]: creating an outbox needs
// opts.Partitions (1 or more), which it stores.
func Migrate(ctx context.Context, db *sql.DB, opts Options) error {
	return MigrateTo(ctx, db, opts, LatestVersion())
}

// MigrateTo applies up (or down) migrations until the outbox is at
// version, recording applied versions in Table+"_migrations". Version 0
// removes every table of the outbox, the migrations table included.
//
// Creating the outbox stores opts.Partitions (1 or more) as its partition
// count. When the count is already stored, opts.Partitions 0 checks
// nothing, and any other value must equal it, else MigrateTo changes
// nothing and returns an error wrapping an [*outbox.PartitionMismatchError].
// Running Migrate again with the same count is a no-op.
//
// Concurrent callers (every replica of a service at start-up) serialize on
// a named lock (GET_LOCK) of the database and table, held on one
// connection for the whole run: the first migrates, the others find
// nothing left to do. MySQL commits each DDL statement on its own, so a run
// that stops half-way (a lost connection) leaves the statements it ran;
// every statement of the migrations can run again, and the next run
// completes the migration.
func MigrateTo(ctx context.Context, db *sql.DB, opts Options, version int) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if db == nil {
		return errors.New("mysqloutbox: Migrate: db is nil; pass a *sql.DB from sql.Open(\"mysql\", dsn)")
	}
	ms := loadMigrations()
	if version < 0 || version > ms[len(ms)-1].Version {
		return fmt.Errorf("mysqloutbox: Migrate: version %d is unknown; versions run from 0 to %d", version, ms[len(ms)-1].Version)
	}
	n := newNames(opts.Table)
	if err := migrate(ctx, db, opts, n, ms, version); err != nil {
		return fmt.Errorf("mysqloutbox: Migrate %s to version %d: %w", n.outbox, version, err)
	}
	return nil
}

// migrationLockTimeout bounds the wait for another caller's migration, in
// seconds.
const migrationLockTimeout = 60

func migrate(ctx context.Context, db *sql.DB, opts Options, n names, ms []migration, version int) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(CONCAT('mysqloutbox migrate ', DATABASE(), '.', ?), ?)", opts.Table, migrationLockTimeout).Scan(&got); err != nil {
		return err
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("another migration of this outbox held its lock for %d s: wait for it to finish, or find the session holding the lock (SELECT IS_USED_LOCK(CONCAT('mysqloutbox migrate ', DATABASE(), '.%s')))", migrationLockTimeout, opts.Table)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK(CONCAT('mysqloutbox migrate ', DATABASE(), '.', ?))", opts.Table) //nolint:errcheck // the session ends with the connection's return anyway
	if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+n.migrations+` (
    version    INT          NOT NULL,
    name       VARCHAR(255) NOT NULL,
    applied_at DATETIME(6)  NOT NULL,
    PRIMARY KEY (version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`); err != nil {
		return err
	}
	applied, err := appliedVersions(ctx, conn, n)
	if err != nil {
		return err
	}
	if version >= 1 {
		if err := checkStoredPartitions(ctx, conn, n, opts.Partitions, applied[1]); err != nil {
			return err
		}
	}
	for _, m := range ms { // up, oldest first
		if m.Version > version || applied[m.Version] {
			continue
		}
		if err := runStatements(ctx, conn, renderMigration(m.Up, opts)); err != nil {
			return fmt.Errorf("migration %03d_%s up: %w", m.Version, m.Name, err)
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO "+n.migrations+" (version, name, applied_at) VALUES (?, ?, "+nowSQL+")", m.Version, m.Name); err != nil {
			return err
		}
	}
	for i := len(ms) - 1; i >= 0; i-- { // down, newest first
		m := ms[i]
		if m.Version <= version || !applied[m.Version] {
			continue
		}
		if err := runStatements(ctx, conn, renderMigration(m.Down, opts)); err != nil {
			return fmt.Errorf("migration %03d_%s down: %w", m.Version, m.Name, err)
		}
		if _, err := conn.ExecContext(ctx, "DELETE FROM "+n.migrations+" WHERE version = ?", m.Version); err != nil {
			return err
		}
	}
	if version == 0 {
		_, err := conn.ExecContext(ctx, "DROP TABLE IF EXISTS "+n.migrations)
		return err
	}
	return nil
}

// runStatements runs the statements of a migration file in order. MySQL
// has no ADD COLUMN IF NOT EXISTS (nor DROP COLUMN IF EXISTS): the
// server's errors for a column that is already there (1060) or already
// gone (1091) count as the statement done, so that a migration that
// stopped half-way runs again to its end.
func runStatements(ctx context.Context, conn *sql.Conn, sqlText string) error {
	for _, s := range sqlmigrate.Statements(sqlText) {
		if _, err := conn.ExecContext(ctx, s); err != nil && !isMySQLError(err, errDupColumn) && !isMySQLError(err, errCantDrop) {
			return err
		}
	}
	return nil
}

func appliedVersions(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, n names) (map[int]bool, error) {
	rows, err := q.QueryContext(ctx, "SELECT version FROM "+n.migrations)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		applied[v] = true
	}
	return applied, rows.Err()
}

// checkStoredPartitions checks configured against the partition count
// stored with the outbox (stored reports whether migration 001 is
// applied).
func checkStoredPartitions(ctx context.Context, conn *sql.Conn, n names, configured int, stored bool) error {
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
	if err := conn.QueryRowContext(ctx, "SELECT partitions FROM "+n.meta+" WHERE one = 1").Scan(&count); err != nil {
		return fmt.Errorf("reading the stored partition count: %w", err)
	}
	if count != configured {
		return &outbox.PartitionMismatchError{Outbox: n.outbox, Configured: configured, Stored: count}
	}
	return nil
}

// MigrationStatus reports the versions of the outbox named by opts.Table
// that are applied, ascending (none when the outbox does not exist), for
// "outbox migrate status".
func MigrationStatus(ctx context.Context, db *sql.DB, opts Options) ([]int, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	applied, err := appliedVersions(ctx, db, newNames(opts.Table))
	if isMySQLError(err, errNoSuchTable) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mysqloutbox: MigrationStatus: %w", err)
	}
	out := make([]int, 0, len(applied))
	for v := range applied {
		out = append(out, v)
	}
	sort.Ints(out)
	return out, nil
}
