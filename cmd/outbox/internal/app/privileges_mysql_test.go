package app

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/clitest"
)

// TestMySQLLeastPrivilege: the grants 'outbox help stores' names are
// enough: a user with SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER
// and INDEX on the database creates the outbox; one with SELECT, INSERT,
// UPDATE and DELETE runs every admin command and a move out of it, and
// its migrate up is refused with the grant to add.
func TestMySQLLeastPrivilege(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	full, db := cliMySQL(t)
	u, err := url.Parse(full)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	const pw = "Least-Pw-42"
	users := map[string]string{
		name + "_m": "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX",
		name + "_a": "SELECT, INSERT, UPDATE, DELETE",
	}
	for user, grants := range users {
		for _, q := range []string{"CREATE USER '" + user + "'@'%' IDENTIFIED BY '" + pw + "'", "GRANT " + grants + " ON `" + name + "`.* TO '" + user + "'@'%'"} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP USER IF EXISTS '"+user+"'@'%'") })
	}
	as := func(user string) string {
		c := *u
		c.User = url.UserPassword(user, pw)
		return c.String()
	}
	migrator, app := as(name+"_m"), as(name+"_a")
	cliFails(t, 1, []string{"may not do this (1142", "GRANT SELECT, INSERT, UPDATE, DELETE ON `" + name + "`.* (and CREATE, DROP, ALTER, INDEX for outbox migrate)"},
		"migrate", "up", "--partitions", "2", "--store", app)
	cliOK(t, "migrate", "up", "--partitions", "2", "--store", migrator, "--table", "least_outbox")
	b, err := mysqloutbox.New(ctx, db, mysqloutbox.Options{Table: "least_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	clitest.SeedAdmin(t, b, func(e ...outbox.Entry) error {
		return b.InTx(ctx, db, func(tx *sql.Tx) error { return b.AppendInTx(ctx, tx, e...) })
	})
	exerciseAdmin(t, b, "--store", app, "--table", "least_outbox")
	cliOK(t, "purge", "--before", "1h", "--yes", "--store", app, "--table", "least_outbox")
	cliOK(t, "migrate", "status", "--store", app, "--table", "least_outbox")
	to := redisEnd(t, 2)
	move := append([]string{"move", "--from", app, "--from-table", "least_outbox"}, to.flags("to")...)
	cliOK(t, append(move, "--prepare")...)
	if got := cliOK(t, append(move, "--yes")...); !strings.Contains(got, "moved ") || !strings.Contains(got, "is released") {
		t.Fatalf("move out of the outbox as the DML-only user:\n%s", got)
	}
	if got := cliOK(t, append(move, "--verify")...); !strings.Contains(got, "the move is complete") {
		t.Fatalf("verify:\n%s", got)
	}
}
