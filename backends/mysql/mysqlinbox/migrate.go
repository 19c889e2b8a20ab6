package mysqlinbox

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox/inbox"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migrations holds the schema migrations as numbered files
// (NNN_name.up.sql, NNN_name.down.sql) at its root, for goose or
// golang-migrate. The files use the default table name "inbox": with
// another Options.Table, run the SQL [MigrationSQL] returns instead.
// [Migrate] needs neither.
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

// loadMigrations reads the embedded migrations, oldest first. A file that
// does not fit is a defect of the build: it panics.
func loadMigrations() []migration {
	files, err := fs.ReadDir(Migrations, ".")
	if err != nil {
		panic(err)
	}
	byVersion := map[int]*migration{}
	for _, f := range files {
		m := migrationName.FindStringSubmatch(f.Name())
		if m == nil {
			panic("mysqlinbox: unexpected migration file " + f.Name())
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(Migrations, f.Name())
		if err != nil {
			panic(err)
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
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	return out
}

// LatestVersion is the version of the newest embedded migration.
func LatestVersion() int {
	ms := loadMigrations()
	return ms[len(ms)-1].version
}

// quotedName matches the backquoted names of the migration files that
// derive from the default table name (`inbox`, `inbox_keyseq`, ...).
var quotedName = regexp.MustCompile("`inbox((?:_[a-z0-9_]+)?)`")

// renderMigration puts the configured table name into a migration file
// (into its SQL, not its comments).
func renderMigration(sqlText, table string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(sqlText, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			line = quotedName.ReplaceAllStringFunc(line, func(m string) string {
				return "`" + table + quotedName.FindStringSubmatch(m)[1] + "`"
			})
		}
		b.WriteString(line)
	}
	return b.String()
}

// Markers of a statement whose body holds semicolons (a stored
// procedure), in goose's spelling.
const (
	statementBegin = "-- +goose StatementBegin"
	statementEnd   = "-- +goose StatementEnd"
)

// statements splits a rendered migration into its statements (each ends
// with a semicolon at the end of a line, or spans the lines between
// statementBegin and statementEnd), without the comment lines:
// go-sql-driver/mysql runs one statement per call unless the DSN sets
// multiStatements.
func statements(sqlText string) []string {
	var out []string
	var cur strings.Builder
	whole := false // between statementBegin and statementEnd
	for _, line := range strings.Split(sqlText, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == statementBegin:
			whole = true
			continue
		case t == statementEnd:
			whole = false
			t = ";"
		case t == "" || strings.HasPrefix(t, "--"):
			continue
		default:
			cur.WriteString(line)
			cur.WriteString("\n")
		}
		if strings.HasSuffix(t, ";") && !whole {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}

// MigrationSQL returns every up migration, rendered with opts.Table, for
// a migration tool of your own; run it in the inbox's database. [Migrate]
// runs the same statements. The procedures of migration 002 span the
// lines between "-- +goose StatementBegin" and "-- +goose StatementEnd"
// (their bodies hold semicolons): goose honors the markers, a tool that
// sends the whole text as one multi-statement string (golang-migrate with
// multiStatements=true) needs nothing, and the mysql command-line client
// needs a DELIMITER around them. It fails only for a bad opts.Table.
func MigrationSQL(opts Options) (string, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, m := range loadMigrations() {
		fmt.Fprintf(&b, "-- %03d_%s\n%s\n", m.version, m.name, renderMigration(m.up, opts.Table))
	}
	return b.String(), nil
}

// Migrate creates the inbox tables (and the procedures of migration 002)
// of opts.Table in db's database, or brings them to the newest version
// ([LatestVersion]), recording applied
// versions in Table+"_migrations". Running it again is a no-op, so every
// replica of a consumer may run it at start-up.
//
// Concurrent callers serialize on a named lock of the server (GET_LOCK,
// see [LockName]), held on one connection for the whole run: the first
// migrates, the others wait (up to 60 s, then fail) and find nothing left
// to do. MySQL commits each DDL statement on its own, so a run that stops
// half-way (a lost connection) leaves the statements it ran; every
// statement of the migrations can run again, and the next run completes
// the migration. Errors start with "mysqlinbox: Migrate".
func Migrate(ctx context.Context, db *sql.DB, opts Options) error {
	return migrateTo(ctx, db, opts, LatestVersion(), "Migrate")
}

// MigrateDown removes the inbox of opts.Table: its procedures, every
// table, with the recorded IDs, the keys' sequence numbers and the stored
// offsets, and Table+"_migrations" last. After it, consumers apply every message again
// and start from the broker's offsets. It serializes with Migrate on the
// same lock; on an inbox that does not exist it does nothing.
func MigrateDown(ctx context.Context, db *sql.DB, opts Options) error {
	return migrateTo(ctx, db, opts, 0, "MigrateDown")
}

// MigrationStatus returns the versions of the inbox of opts.Table that are
// applied, ascending (none when the inbox does not exist), for
// "outbox migrate status".
func MigrationStatus(ctx context.Context, db *sql.DB, opts Options) ([]int, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if db == nil {
		return nil, errNilDB("MigrationStatus")
	}
	applied, err := appliedVersions(ctx, db, newNames(opts.Table))
	if isMySQLError(err, errNoSuchTable) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("mysqlinbox: MigrationStatus: %w", err)
	}
	out := make([]int, 0, len(applied))
	for v := range applied {
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}

// LockName returns the SQL expression of the named lock (GET_LOCK) that
// Migrate and MigrateDown of the inbox table hold while they run, in the
// connection's database, for finding the session that holds it:
// SELECT IS_USED_LOCK(<expression>). It is a hash, so that it stays
// within the 64 characters MySQL allows whatever the names' lengths.
func LockName(table string) string {
	return "CONCAT('mysqlinbox ', LEFT(SHA2(CONCAT(DATABASE(), '.', " + quoteString(table) + "), 256), 40))"
}

// quoteString quotes s as an SQL string literal (s is a checked table
// name: no NUL, no backquote).
func quoteString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'"
}

func errNilDB(op string) error {
	return fmt.Errorf("mysqlinbox: %s: db is nil; pass a *sql.DB from sql.Open(\"mysql\", dsn): %w", op, inbox.ErrInvalidArgument)
}

// migrationLockTimeout bounds the wait for another caller's migration, in
// seconds.
const migrationLockTimeout = 60

func migrateTo(ctx context.Context, db *sql.DB, opts Options, version int, op string) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if db == nil {
		return errNilDB(op)
	}
	n := newNames(opts.Table)
	if err := migrate(ctx, db, n, loadMigrations(), version); err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return fmt.Errorf("mysqlinbox: %s %s to version %d: %w", op, n.inbox, version, err)
	}
	return nil
}

func migrate(ctx context.Context, db *sql.DB, n names, ms []migration, version int) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	lock := LockName(n.table)
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK("+lock+", ?)", migrationLockTimeout).Scan(&got); err != nil {
		return err
	}
	if !got.Valid || got.Int64 != 1 {
		return fmt.Errorf("another migration of this inbox held its lock for %d s: wait for it to finish, or find the session holding the lock (SELECT IS_USED_LOCK(%s))", migrationLockTimeout, lock)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "DO RELEASE_LOCK("+lock+")") //nolint:errcheck // the session ends with the connection's return anyway
	if version == 0 {
		return migrateDown(ctx, conn, n, ms)
	}
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
	for _, m := range ms { // up, oldest first
		if m.version > version || applied[m.version] {
			continue
		}
		if err := runStatements(ctx, conn, renderMigration(m.up, n.table)); err != nil {
			return fmt.Errorf("migration %03d_%s up: %w", m.version, m.name, err)
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO "+n.migrations+" (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))", m.version, m.name); err != nil {
			return err
		}
	}
	return nil
}

// migrateDown runs the down migration of every applied version, newest
// first, then drops the migrations table. Without a migrations table it
// does nothing.
func migrateDown(ctx context.Context, conn *sql.Conn, n names, ms []migration) error {
	applied, err := appliedVersions(ctx, conn, n)
	if isMySQLError(err, errNoSuchTable) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, m := range slices.Backward(ms) {
		if !applied[m.version] {
			continue
		}
		if err := runStatements(ctx, conn, renderMigration(m.down, n.table)); err != nil {
			return fmt.Errorf("migration %03d_%s down: %w", m.version, m.name, err)
		}
		if _, err := conn.ExecContext(ctx, "DELETE FROM "+n.migrations+" WHERE version = ?", m.version); err != nil {
			return err
		}
	}
	_, err = conn.ExecContext(ctx, "DROP TABLE IF EXISTS "+n.migrations)
	return err
}

func runStatements(ctx context.Context, conn *sql.Conn, sqlText string) error {
	for _, s := range statements(sqlText) {
		if _, err := conn.ExecContext(ctx, s); err != nil {
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

// Server error numbers the store maps.
const (
	errCheckRead   = 1020 // ER_CHECKREAD: MariaDB's innodb_snapshot_isolation found a row changed since the snapshot
	errNoSuchTable = 1146 // ER_NO_SUCH_TABLE
	errLockWait    = 1205 // ER_LOCK_WAIT_TIMEOUT
	errDeadlock    = 1213 // ER_LOCK_DEADLOCK
)

// isMySQLError reports whether err wraps a server error with number.
func isMySQLError(err error, number uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == number
}
