package app

import (
	"context"
	"database/sql"
	"net/url"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// cliMySQL creates a database of the test's own on the test server
// (OUTBOX_MYSQL_URL), and a user with a password that may use it (so
// every test checks that the password never shows), both dropped at its
// end; it returns the mysql:// store URL of that user and database and a
// pool connected to it as the server's URL's user. It skips (or fails,
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
	for _, q := range []string{
		"CREATE DATABASE `" + name + "`",
		"CREATE USER '" + name + "'@'%' IDENTIFIED BY '" + mysqlTestPassword + "'",
		"GRANT ALL ON `" + name + "`.* TO '" + name + "'@'%'",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			admin.Close()
			t.Fatalf("%s: %v", q, err)
		}
	}
	db, err := sql.Open("mysql", testenv.MySQLDSN(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, q := range []string{"DROP DATABASE IF EXISTS `" + name + "`", "DROP USER IF EXISTS '" + name + "'@'%'"} {
			if _, err := admin.ExecContext(ctx, q); err != nil {
				t.Errorf("%s: %v", q, err)
			}
		}
		admin.Close()
	})
	u, err := url.Parse(testenv.MySQLURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	u.User = url.UserPassword(name, mysqlTestPassword)
	return u.String(), db
}

// mysqlTestPassword is the password of cliMySQL's users.
// It needs percent-encoding in a URL.
const mysqlTestPassword = "My/Secret@Pw-7"

// cliMySQLOutbox creates an outbox with opts in a database of the test's
// own (cliMySQL) and opens it; it returns the store URL, the backend, the
// pool and an append function (one transaction per call).
func cliMySQLOutbox(t testing.TB, opts mysqloutbox.Options) (string, *mysqloutbox.Backend, *sql.DB, func(...outbox.Entry) error) {
	t.Helper()
	ctx := context.Background()
	url, db := cliMySQL(t)
	if err := mysqloutbox.Migrate(ctx, db, opts); err != nil {
		t.Fatal(err)
	}
	b, err := mysqloutbox.New(ctx, db, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	appendFn := func(e ...outbox.Entry) error {
		return b.InTx(ctx, db, func(tx *sql.Tx) error { return b.AppendInTx(ctx, tx, e...) })
	}
	return url, b, db, appendFn
}
