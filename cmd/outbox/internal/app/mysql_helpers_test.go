package app

import (
	"context"
	"database/sql"
	"net/url"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox/internal/testenv"
)

// cliMySQL creates a database of the test's own on the test server
// (OUTBOX_MYSQL_URL), dropped at its end, and returns the mysql:// store
// URL of that database and a pool connected to it; it skips (or fails,
// with OUTBOX_REQUIRE_SERVICES=1) when no server answers.
func cliMySQL(t testing.TB) (string, *sql.DB) {
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
	name := uniqueName("cli")
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
	u, err := url.Parse(testenv.MySQLURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String(), db
}
