package mysqloutbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/internal/headercodec"
)

// TestFetchBatchParksCorruptRows: rows a hand-made UPDATE left
// unpublishable (headers that do not decode, an empty topic) are parked
// by the fetch with a reason naming the column and the fix, reported
// once, and release the entries of their key behind them.
func TestFetchBatchParksCorruptRows(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	good := headercodec.Encode(map[string]string{"h": "v", "empty": ""})
	insertRows(t, db,
		row{id: "bad-headers", key: "k", headers: []byte{0xde, 0xad, 0xbe, 0xef, 0x00, 0xff}, due: -3 * time.Second},
		row{id: "k2", key: "k", headers: good, due: -2 * time.Second},
		row{id: "no-topic", key: "j", due: -2 * time.Second},
		row{id: "ok", headers: good, due: -time.Second},
	)
	exec(t, db, "UPDATE `outbox` SET topic = '' WHERE id = 'no-topic'")
	l := takeLease(t, db, 0, "me")

	stale := l
	stale.Version--
	if _, err := b.FetchBatch(ctx, stale, 10); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("stale lease: %v, want ErrLeaseLost", err)
	}
	if r := readRow(t, db, "bad-headers"); r.state != "pending" {
		t.Fatalf("a fetch with a stale lease parked a row: %+v", r)
	}

	batch, err := b.FetchBatch(ctx, l, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "entries", batch.Entries, "k2", "ok")
	if h := batch.Entries[0].Headers; len(h) != 2 || h["h"] != "v" {
		t.Fatalf("headers of k2: %v", h)
	}
	if len(batch.Parked) != 2 || batch.Parked[0].ID != "bad-headers" || batch.Parked[1].ID != "no-topic" {
		t.Fatalf("parked: %+v", batch.Parked)
	}
	for _, p := range batch.Parked {
		r := readRow(t, db, p.ID)
		if r.state != "parked" || r.attempts != 1 || r.lastError != p.Reason || !strings.HasPrefix(p.Reason, "mysqloutbox: ") || !strings.Contains(p.Reason, "requeue") {
			t.Fatalf("%s stored as %+v, reported with %q", p.ID, r, p.Reason)
		}
	}
	if !strings.Contains(batch.Parked[0].Reason, "headers column") || batch.Parked[0].Topic != "t" || batch.Parked[0].Key != "k" {
		t.Fatalf("headers park: %+v", batch.Parked[0])
	}
	if !strings.Contains(batch.Parked[1].Reason, "empty topic column") || batch.Parked[1].Key != "j" {
		t.Fatalf("topic park: %+v", batch.Parked[1])
	}
	again, err := b.FetchBatch(ctx, l, 10)
	if err != nil || len(again.Parked) != 0 {
		t.Fatalf("second fetch: %+v, %v; parks are reported once", again, err)
	}
}

// TestFetchCorruptRunLongerThanTheLimit: FetchBatch counts parks against
// the limit; FindPendingBatch reads on past a round of parks only.
func TestFetchCorruptRunLongerThanTheLimit(t *testing.T) {
	t.Parallel()
	b, db := newBackend(t, mysqloutbox.Options{Partitions: 1})
	ctx := context.Background()
	insertRows(t, db, row{id: "k2", key: "k", due: -2 * time.Second}, row{id: "ok", due: -time.Second})
	l := takeLease(t, db, 0, "me")
	for _, id := range []string{"c1", "c2", "c3"} {
		insertRows(t, db, row{id: id, headers: []byte{0x05}, due: -time.Hour})
	}
	batch, err := b.FetchBatch(ctx, l, 2)
	if err != nil || len(batch.Entries)+len(batch.Parked) > 2 || len(batch.Parked) != 2 {
		t.Fatalf("limit 2 over 3 corrupt rows: %+v, %v", batch, err)
	}
	got, err := b.FindPendingBatch(ctx, l, 2)
	if err != nil {
		t.Fatal(err)
	}
	// c3 comes first (due an hour ago): parked, and the rest of the
	// round returned.
	wantIDs(t, "FindPendingBatch past the last corrupt row", got, "k2")
	if r := readRow(t, db, "c3"); r.state != "parked" {
		t.Fatalf("c3: %+v", r)
	}
}
