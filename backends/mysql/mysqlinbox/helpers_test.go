package mysqlinbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox/backends/mysql/mysqlinbox"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// newDB creates a database of its own for t on the test server
// (OUTBOX_MYSQL_URL), dropped when t ends, and returns a pool connected
// to it and its name.
func newDB(t testing.TB) (*sql.DB, string) {
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
	db, err := sql.Open("mysql", testenv.MySQLDSN(name))
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

// newStore migrates an inbox with opts in a database of its own and
// returns its store and the pool.
func newStore(t testing.TB, opts mysqlinbox.Options) (*mysqlinbox.Store, *sql.DB) {
	t.Helper()
	db, _ := newDB(t)
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
