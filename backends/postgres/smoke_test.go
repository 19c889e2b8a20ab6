package pgoutbox_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

func TestSmoke(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
		b, p := newBackend(t, mode, pgoutbox.Options{})
		ctx := t.Context()
		tx, err := p.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = b.AppendInTx(ctx, tx, outbox.Entry{ID: "a", Topic: "t", Key: "k", Payload: []byte("x"), Headers: map[string]string{"h": "\x00v"}},
			outbox.Entry{ID: "b", Topic: "t", Key: "k"}, outbox.Entry{ID: "a", Topic: "t"})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		l, err := b.AcquireLease(ctx, 0, "me", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		got, err := b.FindPendingBatch(ctx, l, 10)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", got)
		if err := b.MarkFailed(ctx, l, []outbox.Failure{{ID: "a", Error: "boom", RetryAt: time.Now()}}); err != nil {
			t.Fatal(err)
		}
		got, err = b.FindPendingBatch(ctx, l, 10)
		t.Logf("%+v %v", got, err)
		if err := b.MarkSent(ctx, l, []string{"a", "b"}); err != nil {
			t.Fatal(err)
		}
		got, err = b.FindPendingBatch(ctx, l, 10)
		t.Logf("%+v %v", got, err)
		err = b.MarkSent(ctx, outbox.Lease{Owner: "x", Version: 9}, []string{"a"})
		t.Logf("%v", err)
	}
}
