package app

import (
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
