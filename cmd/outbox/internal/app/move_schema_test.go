package app

import (
	"context"
	"net/url"
	"testing"

	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"

	"github.com/outboxrelay/outbox"
)

// TestMoveOlderSchema: a Postgres end whose tables predate the move's
// migration (006) is a clear error naming the fix, and nothing changes on
// either side.
func TestMoveOlderSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cur := pgEnd(t, 2)
	requireMovable(t, cur)
	seedMove(t, cur, 2)

	// An outbox of the same server left at migration 005.
	base, pool := cliPostgres(t)
	schema := cliSchema(t, pool)
	if err := pgoutbox.MigrateTo(ctx, pool, pgoutbox.Options{Schema: schema, Partitions: 2}, 5); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u.User.Password(); !ok {
		u.User = url.UserPassword(u.User.Username(), "Mv-Secret-Pw9")
	}
	old := []string{"--to", u.String(), "--to-schema", schema}

	r := cliFails(t, 1, []string{"migrate up"}, append(append([]string{"move"}, cur.flags("from")...), append(old, "--prepare")...)...)
	t.Log(r.stderr)
	noSecret(t, r, cur.url, u.String())
	r = cliFails(t, 1, []string{"migrate up"}, append(append([]string{"move"}, cur.flags("from")...), append(old, "--yes")...)...)
	noSecret(t, r, cur.url, u.String())

	if sealed, _ := cur.store.(outbox.Sealer).Sealed(ctx); sealed {
		t.Fatal("the source was sealed")
	}
	var held bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", schema+".outbox_hold").Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held {
		t.Fatal("the move migrated the destination on its own")
	}
}
