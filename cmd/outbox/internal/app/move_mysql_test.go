package app

import (
	"strings"
	"testing"

	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// mysqlEnd makes a MySQL outbox with the given partition count in a
// database of the test's own, reached as a user with a password (which
// no output may show).
func mysqlEnd(t *testing.T, partitions int) moveEnd {
	t.Helper()
	table := "moved_outbox"
	url, b, _, appendFn := cliMySQLOutbox(t, mysqloutbox.Options{Table: table, Partitions: partitions})
	return moveEnd{url: url, name: []string{"table", table}, store: b, append: appendFn}
}

func TestMovePostgresToMySQL(t *testing.T) {
	t.Parallel()
	moveEndToEnd(t, pgEnd(t, 4), mysqlEnd(t, 8))
}

func TestMoveMySQLToRedis(t *testing.T) {
	t.Parallel()
	moveEndToEnd(t, mysqlEnd(t, 4), redisEnd(t, 8))
}

func TestMoveMySQLReshard(t *testing.T) {
	t.Parallel()
	moveEndToEnd(t, mysqlEnd(t, 4), mysqlEnd(t, 16))
}

// TestMoveBadInputMySQL: flags of another store's outbox on a MySQL side
// are refused naming the side's flags, and the same MySQL outbox named
// twice (another user, other parameters) is refused before anything
// connects.
func TestMoveBadInputMySQL(t *testing.T) {
	t.Parallel()
	const a, b = "mysql://app:Pw-One-1@db.internal:3306/app", "mariadb://other@db.internal/app?timeout=5s"
	cliFails(t, 2, []string{"the source and the destination are the same outbox (mysql://db.internal:3306/app `outbox`)", "--to-table (MySQL)"},
		"move", "--from", a, "--to", b, "--dry-run")
	cliFails(t, 2, []string{"the same outbox (mysql://db.internal:3306/app `o2`)"}, "move", "--from", a, "--from-table", "o2", "--to", b, "--to-table", "o2", "--dry-run")
	cliFails(t, 2, []string{"--from-schema names a Postgres schema, but the source store is MySQL"}, "move", "--from", a, "--from-schema", "s", "--to", "redis://127.0.0.1:1/0", "--dry-run")
	cliFails(t, 2, []string{"--to-prefix names a Redis outbox, but the destination store is MySQL", "--to-table"}, "move", "--from", "redis://127.0.0.1:1/0", "--to", a, "--to-prefix", "{x}", "--dry-run")
	r := cliFails(t, 2, []string{"the destination (--to)", "names no database"}, "move", "--from", "redis://127.0.0.1:1/0", "--to", "mysql://app:Pw-One-1@db.internal:3306", "--dry-run")
	if strings.Contains(r.stdout+r.stderr, "Pw-One-1") {
		t.Fatalf("the password shows:\n%v", r)
	}
}
