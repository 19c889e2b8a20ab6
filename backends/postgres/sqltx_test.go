package pgoutbox_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

func TestAppendInSQLTx(t *testing.T) {
	t.Parallel()
	b, p := newBackend(t, extended, pgoutbox.Options{})
	db := stdlib.OpenDBFromPool(p)
	defer db.Close()
	ctx := t.Context()
	future := time.Now().Add(time.Hour)
	in := []outbox.Entry{
		{ID: `q"uo\te{,}`, Topic: "t", Key: "k\x00\xff", Payload: []byte{0, 1, 2}, Headers: map[string]string{"h": "\x00"}},
		{ID: "nil-payload", Topic: "t", Key: "k\x00\xff"},
		{ID: "scheduled", Topic: "t", NotBefore: future},
		{ID: "nil-payload", Topic: "t", Payload: []byte("duplicate ID: ignored")},
	}
	for _, commit := range []bool{false, true} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.AppendInSQLTx(ctx, tx, in...); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	l, err := b.AcquireLease(ctx, 0, "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.FindPendingBatch(ctx, l, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != in[0].ID || got[1].ID != in[1].ID {
		t.Fatalf("got %+v, want the first two entries (the third is scheduled, the fourth a duplicate)", got)
	}
	if got[0].Key != in[0].Key || string(got[0].Payload) != string(in[0].Payload) || got[0].Headers["h"] != "\x00" || got[1].Payload != nil {
		t.Fatalf("fields did not round-trip: %+v", got)
	}
	st, err := b.Stats(ctx)
	if err != nil || st.Pending != 3 {
		t.Fatalf("Stats: %+v, %v; want 3 pending", st, err)
	}
}
