package pgoutbox_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// Retention of the archive by hand (a relay with
// RelayOptions.ArchiveRetention makes the same calls): bounded batches,
// oldest first, until none is left before the horizon.
func ExampleBackend_PurgeArchiveBatch() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("OUTBOX_POSTGRES_URL"))
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer pool.Close()
	schema := newExampleSchema()
	defer dropExampleSchema(pool, schema)
	if err := pgoutbox.Migrate(ctx, pool, pgoutbox.Options{Schema: schema, Partitions: 1}); err != nil {
		fmt.Println("migrate:", err)
		return
	}
	b, err := pgoutbox.New(ctx, pool, pgoutbox.Options{Schema: schema, Archive: true})
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer b.Close()
	ids := []string{"a", "b", "c"}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return b.AppendInTx(ctx, tx, outbox.Entry{ID: "a", Topic: "t"}, outbox.Entry{ID: "b", Topic: "t"}, outbox.Entry{ID: "c", Topic: "t"})
	})
	if err != nil {
		fmt.Println("append:", err)
		return
	}
	l, err := b.AcquireLease(ctx, 0, "example", time.Minute)
	if err == nil {
		err = b.MarkSent(ctx, l, ids)
	}
	if err != nil {
		fmt.Println("send:", err)
		return
	}

	horizon := time.Now().Add(time.Hour) // everything sent so far is older
	for {
		removed, more, err := b.PurgeArchiveBatch(ctx, horizon, 2)
		if err != nil {
			fmt.Println("purge:", err)
			return
		}
		fmt.Println("removed", removed, "more", more)
		if !more {
			break
		}
	}
	_, ok, _ := b.OldestArchived(ctx)
	fmt.Println("archive empty:", !ok)
	// Output:
	// removed 2 more true
	// removed 1 more false
	// archive empty: true
}
