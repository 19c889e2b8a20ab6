package pgoutbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxrelay/outbox"
	pgoutbox "github.com/outboxrelay/outbox/backends/postgres"
)

// These Examples run against the PostgreSQL at OUTBOX_POSTGRES_URL, each in
// a schema of its own that it drops at the end (TestMain leaves them out
// when no server answers; see examplesNeedPostgres).

// The main flow: create the outbox, append entries in the transaction that
// writes the business row, and relay them.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("OUTBOX_POSTGRES_URL"))
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer pool.Close()

	// Once per deploy, safe from every replica: create the outbox with 4
	// partitions. (The example uses a schema of its own, dropped at the
	// end; yours is likely "public", the default.)
	schema := newExampleSchema()
	defer dropExampleSchema(pool, schema)
	if err := pgoutbox.Migrate(ctx, pool, pgoutbox.Options{Schema: schema, Partitions: 4}); err != nil {
		fmt.Println("migrate:", err)
		return
	}
	orders := pgx.Identifier{schema, "orders"}.Sanitize()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+orders+" (id text PRIMARY KEY, status text NOT NULL)"); err != nil {
		fmt.Println("create table:", err)
		return
	}

	// In every process: New reads the partition count stored with the
	// outbox.
	b, err := pgoutbox.New(ctx, pool, pgoutbox.Options{Schema: schema})
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer b.Close()

	// The business write and its entries commit together, or not at all.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+orders+" (id, status) VALUES ($1, $2)", "order-1", "paid"); err != nil {
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

// An operator's view: the counts and lease of every partition, and one
// entry by ID, here a parked one.
func ExampleBackend_Lookup() {
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
	opts := pgoutbox.Options{Schema: schema, Partitions: 2}
	if err := pgoutbox.Migrate(ctx, pool, opts); err != nil {
		fmt.Println("migrate:", err)
		return
	}
	b, err := pgoutbox.New(ctx, pool, opts)
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer b.Close()

	// An entry that a relay (here, by hand) failed to publish and parked.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return b.AppendInTx(ctx, tx, outbox.Entry{ID: "order-7-paid", Topic: "orders", Key: "order-7", Headers: map[string]string{"schema": "v2"}})
	})
	if err != nil {
		fmt.Println("append:", err)
		return
	}
	p := outbox.PartitionOf("order-7", b.Partitions())
	lease, err := b.AcquireLease(ctx, p, "relay-1", time.Minute)
	if err != nil {
		fmt.Println("lease:", err)
		return
	}
	if err := b.MarkFailed(ctx, lease, []outbox.Failure{{ID: "order-7-paid", Error: "message too large", Park: true}}); err != nil {
		fmt.Println("mark failed:", err)
		return
	}

	parts, err := b.PartitionStats(ctx)
	if err != nil {
		fmt.Println("partition stats:", err)
		return
	}
	for _, s := range parts {
		fmt.Printf("partition %d: pending %d, parked %d, leased by %q\n", s.Partition, s.Pending, s.Parked, s.Lease.Owner)
	}
	info, err := b.Lookup(ctx, "order-7-paid")
	if err != nil {
		fmt.Println("lookup:", err)
		return
	}
	fmt.Printf("%s: partition %d, parked %v, %d attempt, last error %q, headers %v\n",
		info.ID, info.Partition, info.Parked, info.Attempts, info.LastError, info.Headers)
	// Output:
	// partition 0: pending 0, parked 0, leased by ""
	// partition 1: pending 0, parked 1, leased by "relay-1"
	// order-7-paid: partition 1, parked true, 1 attempt, last error "message too large", headers map[schema:v2]
}

// newExampleSchema returns a fresh schema name, so concurrent runs of the
// Examples never meet.
func newExampleSchema() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "pgoutbox_example_" + hex.EncodeToString(b[:])
}

// dropExampleSchema drops schema and everything in it.
func dropExampleSchema(pool *pgxpool.Pool, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		fmt.Println("drop schema:", err)
	}
}
