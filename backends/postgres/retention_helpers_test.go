package pgoutbox_test

import (
	"io/fs"
	"testing"

	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// migrationCount is the number of embedded up migrations: the versions
// Migrate records (numbers may have gaps while parts of a release are
// merged).
func migrationCount(t testing.TB) int {
	t.Helper()
	files, err := fs.Glob(pgoutbox.Migrations, "*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	return len(files)
}
