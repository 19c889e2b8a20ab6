package mysqloutbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
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
	name := "outbox_test_" + hex.EncodeToString(rnd[:])
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

// newBackend migrates an outbox with opts (Partitions 0: 4) in a database
// of its own and opens it.
func newBackend(t testing.TB, opts mysqloutbox.Options) (*mysqloutbox.Backend, *sql.DB) {
	t.Helper()
	db, _ := newDB(t)
	if opts.Partitions == 0 {
		opts.Partitions = 4
	}
	ctx := context.Background()
	if err := mysqloutbox.Migrate(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	b, err := mysqloutbox.New(ctx, db, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, db
}
