package mysqlinbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// newDB creates a database of its own for t on the test server
// (OUTBOX_MYSQL_URL), dropped when t ends, and returns a pool connected
// to it (its DSN changed by tweaks) and its name.
func newDB(t testing.TB, tweaks ...func(*mysql.Config)) (*sql.DB, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := sql.Open("mysql", testenv.MySQLDSN(""))
	if err == nil {
		err = admin.PingContext(ctx)
	}
	if err != nil {
		testenv.Unavailable(t, "MySQL", "OUTBOX_MYSQL_URL", err)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := "inbox_test_" + hex.EncodeToString(rnd[:])
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		admin.Close()
		t.Fatalf("creating database %s: %v", name, err)
	}
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(name))
	if err != nil {
		t.Fatal(err)
	}
	for _, tweak := range tweaks {
		tweak(cfg)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
		admin.Close()
	})
	return db, name
}

// tables lists the tables of db's database, sorted.
func tables(t testing.TB, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY table_name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// newStore migrates an inbox with opts in a database of its own (its DSN
// changed by tweaks) and returns its store and the pool.
func newStore(t testing.TB, opts mysqlinbox.Options, tweaks ...func(*mysql.Config)) (*mysqlinbox.Store, *sql.DB) {
	t.Helper()
	db, _ := newDB(t, tweaks...)
	ctx := context.Background()
	if err := mysqlinbox.Migrate(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	s, err := mysqlinbox.New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, db
}

// sessionVar returns a tweak that sets a session system variable on every
// connection of the pool.
func sessionVar(name, value string) func(*mysql.Config) {
	return func(c *mysql.Config) {
		if c.Params == nil {
			c.Params = map[string]string{}
		}
		c.Params[name] = value
	}
}

// serverHas reports whether the test server knows the system variable
// name (MariaDB and MySQL name some differently).
func serverHas(t testing.TB, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	err := db.QueryRow("SELECT COUNT(*) FROM information_schema.GLOBAL_VARIABLES WHERE VARIABLE_NAME = ?", name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// openDB opens another pool on the database name (made by newDB), its
// DSN changed by tweaks, closed when t ends.
func openDB(t testing.TB, name string, tweaks ...func(*mysql.Config)) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(name))
	if err != nil {
		t.Fatal(err)
	}
	for _, tweak := range tweaks {
		tweak(cfg)
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// routines lists the stored procedures of db's database, sorted.
func routines(t testing.TB, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT routine_name FROM information_schema.ROUTINES WHERE routine_schema = DATABASE() ORDER BY routine_name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
