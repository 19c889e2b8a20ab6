package mysqloutbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/outboxrelay/outbox"
	mysqloutbox "github.com/outboxrelay/outbox/backends/mysql"
	"github.com/outboxrelay/outbox/internal/testenv"
)

// These Examples run against the MySQL or MariaDB server at
// OUTBOX_MYSQL_URL, each in a database of its own that it drops at the
// end (TestMain leaves them out when no server answers; see
// examplesNeedMySQL).

// The main flow: create the outbox, append entries in the transaction that
// writes the business row, and relay them.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// db is what sql.Open("mysql", "user:password@tcp(host:3306)/app")
	// returns; the example uses a database of its own, dropped at the end.
	db, drop := exampleDB(ctx)
	if db == nil {
		return
	}
	defer drop()

	// Once per deploy, safe from every replica: create the outbox with 4
	// partitions.
	if err := mysqloutbox.Migrate(ctx, db, mysqloutbox.Options{Partitions: 4}); err != nil {
		fmt.Println("migrate:", err)
		return
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id VARCHAR(64) PRIMARY KEY, status VARCHAR(16) NOT NULL)"); err != nil {
		fmt.Println("create table:", err)
		return
	}

	// In every process: New reads the partition count stored with the
	// outbox.
	b, err := mysqloutbox.New(ctx, db, mysqloutbox.Options{})
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer b.Close()

	// The business write and its entries commit together, or not at all.
	// InTx commits, wakes this process's relays for the partitions
	// appended to, and runs the function again after a deadlock.
	err = b.InTx(ctx, db, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (id, status) VALUES (?, ?)", "order-1", "paid"); err != nil {
			return err
		}
		return b.AppendInTx(ctx, tx,
			outbox.Entry{Topic: "orders", Key: "order-1", Payload: []byte(`{"status":"created"}`)},
			outbox.Entry{Topic: "orders", Key: "order-1", Payload: []byte(`{"status":"paid"}`)},
		)
	})
	if err != nil {
		fmt.Println("transaction:", err)
		return
	}

	// The relay publishes the entries, in order per key. A ChannelSink
	// stands in for a real sink such as Kafka's.
	published := make(chan outbox.Entry)
	relay, err := outbox.NewRelay(b, outbox.ChannelSink(published), outbox.RelayOptions{})
	if err != nil {
		fmt.Println("relay:", err)
		return
	}
	if err := relay.Start(ctx); err != nil {
		fmt.Println("start:", err)
		return
	}
	for range 2 {
		select {
		case e := <-published:
			fmt.Printf("%s %s %s\n", e.Topic, e.Key, e.Payload)
		case <-ctx.Done():
			fmt.Println("waiting for the relay:", ctx.Err())
			_ = relay.Stop(context.Background())
			return
		}
	}
	// Stop waits for the batch in flight to be marked sent.
	if err := relay.Stop(ctx); err != nil {
		fmt.Println("stop:", err)
		return
	}
	stats, err := b.Stats(ctx)
	if err != nil {
		fmt.Println("stats:", err)
		return
	}
	fmt.Println("pending:", stats.Pending)
	// Output:
	// orders order-1 {"status":"created"}
	// orders order-1 {"status":"paid"}
	// pending: 0
}

// An operator's view: the counts of the outbox, a parked entry by its ID,
// and the entry requeued once the cause is fixed.
func ExampleBackend_Requeue() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, drop := exampleDB(ctx)
	if db == nil {
		return
	}
	defer drop()
	opts := mysqloutbox.Options{Partitions: 2}
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

	// An entry that a relay (here, by hand) failed to publish and parked.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		fmt.Println("begin:", err)
		return
	}
	if err := b.AppendInTx(ctx, tx, outbox.Entry{ID: "order-7-paid", Topic: "orders", Key: "order-7"}); err != nil {
		_ = tx.Rollback()
		fmt.Println("append:", err)
		return
	}
	if err := tx.Commit(); err != nil {
		fmt.Println("commit:", err)
		return
	}
	lease, err := b.AcquireLease(ctx, outbox.PartitionOf("order-7", b.Partitions()), "relay-1", time.Minute)
	if err != nil {
		fmt.Println("lease:", err)
		return
	}
	if err := b.MarkFailed(ctx, lease, []outbox.Failure{{ID: "order-7-paid", Error: "message too large", Park: true}}); err != nil {
		fmt.Println("mark failed:", err)
		return
	}

	stats, err := b.Stats(ctx)
	if err != nil {
		fmt.Println("stats:", err)
		return
	}
	fmt.Printf("pending %d, parked %d\n", stats.Pending, stats.Parked)
	info, err := b.Lookup(ctx, "order-7-paid")
	if err != nil {
		fmt.Println("lookup:", err)
		return
	}
	fmt.Printf("%s: parked %v, %d attempt, last error %q, by %s\n",
		info.ID, info.Parked, info.Attempts, info.LastError, info.History[0].Owner)

	// The broker's limit was raised: deliver it again.
	n, err := b.Requeue(ctx, "order-7-paid")
	if err != nil {
		fmt.Println("requeue:", err)
		return
	}
	info, err = b.Lookup(ctx, "order-7-paid")
	if err != nil {
		fmt.Println("lookup:", err)
		return
	}
	fmt.Printf("requeued %d: parked %v, %d attempts, history kept: %d\n", n, info.Parked, info.Attempts, len(info.History))
	// Output:
	// pending 0, parked 1
	// order-7-paid: parked true, 1 attempt, last error "message too large", by relay-1
	// requeued 1: parked false, 0 attempts, history kept: 1
}

// exampleDB creates a database of its own on the server at
// OUTBOX_MYSQL_URL and returns a pool connected to it and a function
// that drops it; on an error it prints it and returns a nil pool.
func exampleDB(ctx context.Context) (*sql.DB, func()) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := "mysqloutbox_example_" + hex.EncodeToString(rnd[:])
	admin, err := sql.Open("mysql", testenv.MySQLDSN(""))
	if err != nil {
		fmt.Println("connect:", err)
		return nil, nil
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		admin.Close()
		fmt.Println("create database:", err)
		return nil, nil
	}
	db, err := sql.Open("mysql", testenv.MySQLDSN(name))
	if err != nil {
		admin.Close()
		fmt.Println("connect:", err)
		return nil, nil
	}
	return db, func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			fmt.Println("drop database:", err)
		}
		admin.Close()
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	examplesNeedMySQL()
	os.Exit(m.Run())
}

// examplesNeedMySQL makes the Examples runnable or leaves them out. They
// run against a real server and compare what they print with their Output
// comments, and an Example cannot skip itself. So TestMain checks once
// that the server answers: when it does not and OUTBOX_REQUIRE_SERVICES is
// not 1, every Example is left out through -test.skip, and this says so on
// stderr (go test shows no SKIP line for an Example). With
// OUTBOX_REQUIRE_SERVICES=1 they run anyway and fail, as the tests do.
func examplesNeedMySQL() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	db, err := sql.Open("mysql", testenv.MySQLDSN(""))
	if err == nil {
		err = db.PingContext(ctx)
		db.Close()
	}
	if err == nil || testenv.Required() {
		return
	}
	testenv.SkipExamples("mysqloutbox", "MySQL", "no server answers ("+err.Error()+"); set OUTBOX_MYSQL_URL or run ./scripts/services.sh start")
}
