package mysqloutbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
)

// InTx runs the business write and its entries in one transaction,
// retries it when the server breaks a deadlock, and after the commit
// wakes the relays of this process for the partitions appended to.
func ExampleBackend_InTx() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, drop := exampleDB(ctx)
	if db == nil {
		return
	}
	defer drop()
	if err := mysqloutbox.Migrate(ctx, db, mysqloutbox.Options{Partitions: 8}); err != nil {
		fmt.Println("migrate:", err)
		return
	}
	b, err := mysqloutbox.New(ctx, db, mysqloutbox.Options{})
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer b.Close()

	// A relay in this process listens (outbox.NewRelay does this itself).
	wake, err := b.Notifications(ctx)
	if err != nil {
		fmt.Println("notifications:", err)
		return
	}

	// fn may run more than once: it holds only the transaction's work.
	err = b.InTx(ctx, db, func(tx *sql.Tx) error {
		return b.AppendInTx(ctx, tx, outbox.Entry{Topic: "orders", Key: "order-7", Payload: []byte(`{"status":"paid"}`)})
	})
	if err != nil {
		fmt.Println("in tx:", err)
		return
	}
	fmt.Println("woken for partition", <-wake, "=", outbox.PartitionOf("order-7", 8))
	// Output:
	// woken for partition 3 = 3
}

// Commit is tx.Commit plus the wake-up, for transactions the caller runs
// itself. Errors for which Retryable is true mean: run the transaction
// again.
func ExampleBackend_Commit() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, drop := exampleDB(ctx)
	if db == nil {
		return
	}
	defer drop()
	if err := mysqloutbox.Migrate(ctx, db, mysqloutbox.Options{Partitions: 1}); err != nil {
		fmt.Println("migrate:", err)
		return
	}
	b, err := mysqloutbox.New(ctx, db, mysqloutbox.Options{})
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer b.Close()
	wake, err := b.Notifications(ctx)
	if err != nil {
		fmt.Println("notifications:", err)
		return
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		fmt.Println("begin:", err)
		return
	}
	if err := b.AppendInTx(ctx, tx, outbox.Entry{ID: "e1", Topic: "orders"}); err != nil {
		_ = tx.Rollback()
		fmt.Println("append:", err, "; run it again:", mysqloutbox.Retryable(err))
		return
	}
	if err := b.Commit(tx); err != nil {
		fmt.Println("commit:", err, "; run it again:", mysqloutbox.Retryable(err))
		return
	}
	fmt.Println("woken for partition", <-wake)
	// Output:
	// woken for partition 0
}
