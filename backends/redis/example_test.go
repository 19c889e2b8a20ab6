package redisoutbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox"
	redisoutbox "github.com/outboxrelay/outbox/backends/redis"
)

// These Examples run against the Redis at OUTBOX_REDIS_URL, each under a
// key prefix of its own whose keys it deletes at the end (TestMain leaves
// them out when no server answers; see examplesNeedRedis).

// The main flow: open the outbox, append entries in the MULTI/EXEC that
// makes the business write, and relay them.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opt, err := redis.ParseURL(os.Getenv("OUTBOX_REDIS_URL"))
	if err != nil {
		fmt.Println("OUTBOX_REDIS_URL:", err)
		return
	}
	client := redis.NewClient(opt)
	defer client.Close()

	// Creates the outbox with 4 partitions, or opens it. (The example uses
	// a prefix of its own, whose keys it deletes at the end; the default
	// is "{outbox}".)
	prefix := newExamplePrefix()
	defer deleteExampleKeys(client, prefix)
	ob, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix, Partitions: 4})
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer ob.Close()

	// The business write and the entries go in one MULTI/EXEC. HashTag
	// puts the order's key in the slot of the entries' partition, which
	// Redis Cluster needs for a MULTI (on a single node it does no harm).
	orderKey := ob.HashTag("order-1") + ":order:1"
	defer client.Del(context.Background(), orderKey)
	_, err = client.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.HSet(ctx, orderKey, "status", "paid")
		return ob.AppendInTx(ctx, pipe,
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
	relay, err := outbox.NewRelay(ob, outbox.ChannelSink(published), outbox.RelayOptions{})
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
	stats, err := ob.Stats(ctx)
	if err != nil {
		fmt.Println("stats:", err)
		return
	}
	status, err := client.HGet(ctx, orderKey, "status").Result()
	if err != nil {
		fmt.Println("order:", err)
		return
	}
	fmt.Println("order status:", status, "pending:", stats.Pending)
	// Output:
	// orders order-1 {"status":"created"}
	// orders order-1 {"status":"paid"}
	// order status: paid pending: 0
}

// An operator's view: the counts and lease of every partition, and one
// entry by ID, here a parked one.
func ExampleBackend_Lookup() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opt, err := redis.ParseURL(os.Getenv("OUTBOX_REDIS_URL"))
	if err != nil {
		fmt.Println("OUTBOX_REDIS_URL:", err)
		return
	}
	client := redis.NewClient(opt)
	defer client.Close()
	prefix := newExamplePrefix()
	defer deleteExampleKeys(client, prefix)
	ob, err := redisoutbox.New(ctx, client, redisoutbox.Options{Prefix: prefix, Partitions: 2})
	if err != nil {
		fmt.Println("new:", err)
		return
	}
	defer ob.Close()

	// An entry that a relay (here, by hand) failed to publish and parked.
	if err := ob.Append(ctx, outbox.Entry{ID: "order-7-paid", Topic: "orders", Key: "order-7", Headers: map[string]string{"schema": "v2"}}); err != nil {
		fmt.Println("append:", err)
		return
	}
	lease, err := ob.AcquireLease(ctx, outbox.PartitionOf("order-7", ob.Partitions()), "relay-1", time.Minute)
	if err != nil {
		fmt.Println("lease:", err)
		return
	}
	if err := ob.MarkFailed(ctx, lease, []outbox.Failure{{ID: "order-7-paid", Error: "message too large", Park: true}}); err != nil {
		fmt.Println("mark failed:", err)
		return
	}

	parts, err := ob.PartitionStats(ctx)
	if err != nil {
		fmt.Println("partition stats:", err)
		return
	}
	for _, s := range parts {
		fmt.Printf("partition %d: pending %d, parked %d, leased by %q\n", s.Partition, s.Pending, s.Parked, s.Lease.Owner)
	}
	// Lookup looks in every partition (the ID does not say which).
	info, err := ob.Lookup(ctx, "order-7-paid")
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

// newExamplePrefix returns a fresh key prefix (one hash tag), so
// concurrent runs of the Examples never meet.
func newExamplePrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "example:{" + hex.EncodeToString(b[:]) + "}"
}

// deleteExampleKeys deletes the keys of the outbox at prefix: those of
// every partition ("example:{tag:N}:...") and the outbox's own
// ("example:{tag}:...").
func deleteExampleKeys(client *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := client.Scan(ctx, 0, prefix[:len(prefix)-1]+"*", 100).Iterator()
	for iter.Next(ctx) {
		client.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		fmt.Println("deleting the example's keys:", err)
	}
}
