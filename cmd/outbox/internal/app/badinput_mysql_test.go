package app

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/outboxrelay/outbox/internal/testenv"
)

// TestBadInputMySQL: a wrong password, an unknown database, a database
// the user may not use, a server that is not there, TLS the server does
// not offer and an outbox that was never created each get an error that
// names the problem and the fix; no output shows the password.
func TestBadInputMySQL(t *testing.T) {
	t.Parallel()
	good, _ := cliMySQL(t)
	u, err := url.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	user := u.User.Username()
	with := func(edit func(*url.URL)) string {
		c := *u
		edit(&c)
		return c.String()
	}
	check := func(r cliResult) {
		t.Helper()
		for _, pw := range []string{mysqlTestPassword, "Wrong-Pw-31"} {
			if strings.Contains(r.stdout+r.stderr, pw) {
				t.Fatalf("the output shows the password %q:\n%v", pw, r)
			}
		}
	}
	check(cliFails(t, 1, []string{"MySQL at " + u.Host, fmt.Sprintf("rejected user %q or its password (1045 access denied)", user), "correct the user and password in the store URL"},
		"status", "--store", with(func(c *url.URL) { c.User = url.UserPassword(user, "Wrong-Pw-31") })))
	admin, err := url.Parse(testenv.MySQLURL()) // a user that may see every database
	if err != nil {
		t.Fatal(err)
	}
	admin.Path = "/no_such_db_x"
	check(cliFails(t, 1, []string{`has no database "no_such_db_x" (1049 unknown database)`, "CREATE DATABASE `no_such_db_x`"},
		"status", "--store", admin.String()))
	check(cliFails(t, 1, []string{fmt.Sprintf("does not let user %q use database \"mysql\" (1044", user), "fix the database name", "GRANT SELECT, INSERT, UPDATE, DELETE"},
		"status", "--store", with(func(c *url.URL) { c.Path = "/mysql" })))
	check(cliFails(t, 1, []string{"nothing listens at 127.0.0.1:1 (connection refused)"},
		"status", "--store", with(func(c *url.URL) { c.Host = "127.0.0.1:1" })))
	check(cliFails(t, 1, []string{"does not accept TLS connections, but sslmode requires TLS", "sslmode=preferred or sslmode=disable"},
		"status", "--store", with(func(c *url.URL) { c.RawQuery = "sslmode=require" })))
	check(cliFails(t, 1, []string{"no outbox at `outbox` in mysql://" + user + ":xxxxx@", "outbox migrate up --store URL --partitions N"},
		"status", "--store", good))
	check(cliFails(t, 1, []string{"no outbox at `other`", "outbox migrate up --store URL --table other --partitions N"},
		"parked", "--store", good, "--table", "other"))
	check(cliFails(t, 2, []string{"names no database"}, "status", "--store", with(func(c *url.URL) { c.Path = "" })))
	check(cliFails(t, 2, []string{"multiStatements= is not accepted"}, "status", "--store", with(func(c *url.URL) { c.RawQuery = "multiStatements=true" })))
	// sslmode=preferred (the default) falls back to plain text on this
	// server, and driver parameters and session variables pass through.
	r := runCLI(t, "migrate", "status", "--store", with(func(c *url.URL) { c.RawQuery = "sslmode=preferred&timeout=5s&innodb_lock_wait_timeout=7" }))
	check(r)
	if r.code != 0 || !strings.Contains(r.stdout, "no outbox at `outbox` in mysql://"+user+":xxxxx@") {
		t.Fatalf("migrate status with parameters:\n%v", r)
	}
	if help := cliOK(t, "help", "stores"); !strings.Contains(help, "mysql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?PARAMS]") || !strings.Contains(help, "sslmode=disable|preferred|require|verify-ca|verify-full") {
		t.Fatalf("'outbox help stores' lacks the MySQL form:\n%s", help)
	}
}
