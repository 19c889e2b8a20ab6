package sqlmigrate_test

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/outboxrelay/outbox/internal/sqlmigrate"
)

func TestLoadOrdersByVersionAndPairsUpWithDown(t *testing.T) {
	fsys := fstest.MapFS{
		"010_later.up.sql":   {Data: []byte("up 10")},
		"002_first.down.sql": {Data: []byte("down 2")},
		"002_first.up.sql":   {Data: []byte("up 2")},
		"010_later.down.sql": {Data: []byte("down 10")},
	}
	ms, err := sqlmigrate.Load(fsys, "pkg")
	if err != nil {
		t.Fatal(err)
	}
	want := []sqlmigrate.Migration{{2, "first", "up 2", "down 2"}, {10, "later", "up 10", "down 10"}}
	if !slices.Equal(ms, want) {
		t.Fatalf("Load = %+v, want %+v", ms, want)
	}
}

func TestLoadRefusesAMisnamedFile(t *testing.T) {
	_, err := sqlmigrate.Load(fstest.MapFS{"1_x.up.sql": {}}, "pginbox")
	if err == nil || !strings.HasPrefix(err.Error(), `pginbox: unexpected migration file "1_x.up.sql"`) {
		t.Fatalf("Load = %v, want the file named, from pginbox", err)
	}
}

func TestStatements(t *testing.T) {
	got := sqlmigrate.Statements(`-- a comment; with a semicolon
CREATE TABLE a (
    x int
);

INSERT INTO a VALUES (1);
-- +goose StatementBegin
CREATE PROCEDURE p()
BEGIN
    SELECT 1;
END
-- +goose StatementEnd
DROP TABLE b`)
	want := []string{
		"CREATE TABLE a (\n    x int\n)",
		"INSERT INTO a VALUES (1)",
		"CREATE PROCEDURE p()\nBEGIN\n    SELECT 1;\nEND",
		"DROP TABLE b",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Statements =\n%q\nwant\n%q", got, want)
	}
}
