package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/cmd/outbox/internal/clitest"
)

func TestAdminOnMySQL(t *testing.T) {
	t.Parallel()
	url, b, _, appendFn := cliMySQLOutbox(t, mysqloutbox.Options{Table: "admin_outbox", Partitions: 2})
	clitest.SeedAdmin(t, b, appendFn)
	exerciseAdmin(t, b, "--store", url, "--table", "admin_outbox")
}

func TestOperatorsOnMySQL(t *testing.T) {
	t.Parallel()
	url, b, _, appendFn := cliMySQLOutbox(t, mysqloutbox.Options{Table: "ops_outbox", Partitions: 2})
	clitest.SeedAdmin(t, b, appendFn)
	exerciseOperators(t, b, appendFn, "--store", url, "--table", "ops_outbox")
}

// TestPurgeArchiveMySQL: purge deletes the archived entries of a MySQL
// outbox sent before --before, asks first, and says when the outbox does
// not archive.
func TestPurgeArchiveMySQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, b, db, appendFn := cliMySQLOutbox(t, mysqloutbox.Options{Partitions: 1, Archive: true})
	if err := appendFn(outbox.Entry{ID: "a1", Topic: "t"}, outbox.Entry{ID: "a2", Topic: "t"}, outbox.Entry{ID: "a3", Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	lease, err := b.AcquireLease(ctx, 0, "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.MarkSent(ctx, lease, []string{"a1", "a2", "a3"}); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--store", url}
	cliFails(t, 2, []string{"refusing to delete the entries of `outbox_archive`", "--yes"}, append([]string{"purge", "--before", "1h"}, flags...)...)
	if got := cliOK(t, append([]string{"purge", "--before", "1h", "--yes"}, flags...)...); !strings.HasPrefix(got, "purged 0 archived entries sent before") || strings.Contains(got, "does not archive") {
		t.Fatalf("purge of an hour ago: %q", got)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if got := cliOK(t, append([]string{"purge", "--before", future, "--yes", "--batch", "2"}, flags...)...); !strings.HasPrefix(got, "purged 3 archived entries") || !strings.Contains(got, "from `outbox_archive`") {
		t.Fatalf("purge: %q", got)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox_archive").Scan(&n); err != nil || n != 0 {
		t.Fatalf("archive rows after purge: %d, %v", n, err)
	}
	if got := cliOK(t, append([]string{"purge", "--before", future, "--yes"}, flags...)...); !strings.Contains(got, "`outbox_archive` is empty: this outbox does not archive") || !strings.Contains(got, "mysqloutbox.Options{Archive: true}") {
		t.Fatalf("purge of an empty archive: %q", got)
	}
}

// TestUIOnMySQL: outbox ui serves a MySQL outbox reached as a user with a
// password, which nothing it serves or prints shows.
func TestUIOnMySQL(t *testing.T) {
	t.Parallel()
	url, b, _, appendFn := cliMySQLOutbox(t, mysqloutbox.Options{Table: "ui_outbox", Partitions: 2})
	clitest.SeedAdmin(t, b, appendFn)
	exerciseUI(t, "mysql", []string{mysqlTestPassword}, "--store", url, "--table", "ui_outbox")
}
