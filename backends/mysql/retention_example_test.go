package mysqloutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// Retention of the archive: sent entries older than a horizon go in
// bounded batches, oldest first, until a batch reports no more; a relay
// with RelayOptions.ArchiveRetention makes these calls by itself.
func ExampleBackend_PurgeArchiveBatch() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, drop := exampleDB(ctx)
	if db == nil {
		return
	}
	defer drop()
	opts := mysqloutbox.Options{Partitions: 1, Archive: true}
	if err := mysqloutbox.Migrate(ctx, db, opts); err != nil {
		fmt.Println("migrate:", err)
		return
	}
	b, err := mysqloutbox.New(ctx, db, opts)
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer b.Close()
	// Three entries, sent (MarkSent archives them).
	err = b.InTx(ctx, db, func(tx *sql.Tx) error {
		return b.AppendInTx(ctx, tx, outbox.Entry{ID: "a", Topic: "orders"}, outbox.Entry{ID: "b", Topic: "orders"}, outbox.Entry{ID: "c", Topic: "orders"})
	})
	if err != nil {
		fmt.Println("append:", err)
		return
	}
	lease, err := b.AcquireLease(ctx, 0, "relay-1", time.Minute)
	if err != nil {
		fmt.Println("lease:", err)
		return
	}
	batch, _ := b.FindPendingBatch(ctx, lease, 10)
	var ids []string
	for _, e := range batch {
		ids = append(ids, e.ID)
	}
	if err := b.MarkSent(ctx, lease, ids); err != nil {
		fmt.Println("mark sent:", err)
		return
	}

	// Everything sent before the horizon (here: an hour from now, so all
	// three), two rows a call.
	horizon := time.Now().Add(time.Hour)
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
	fmt.Println("archive holds entries:", ok)
	// Output:
	// removed 2 more true
	// removed 1 more false
	// archive holds entries: false
}
