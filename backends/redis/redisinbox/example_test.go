package redisinbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outboxrelay/outbox/backends/redis/redisinbox"
	"github.com/outboxrelay/outbox/inbox"
)

// These Examples run against the Redis at OUTBOX_REDIS_URL, each under a
// key prefix of its own whose keys it deletes at the end (TestMain leaves
// them out when no server answers).

// A consumer credits an account once per message, though the broker
// delivers one of them twice: the credit is queued in the transaction's
// MULTI and applied by the same EXEC that records the message's ID.
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

	// The default prefix is "{inbox}"; the example uses one of its own.
	prefix := examplePrefix()
	defer deletePrefix(client, prefix)
	store, err := redisinbox.New(client, redisinbox.Options{Prefix: prefix})
	if err != nil {
		fmt.Println("store:", err)
		return
	}
	ib, err := inbox.New(store, inbox.Options{})
	if err != nil {
		fmt.Println("inbox:", err)
		return
	}

	// Store.Key puts the account in the inbox's hash tag, which Redis
	// Cluster needs for one MULTI (on a single node it does no harm).
	account := store.Key("account:42")
	credit := func(ctx context.Context, tx *redisinbox.Tx, m inbox.Message) error {
		tx.Pipe().HIncrBy(ctx, account, "cents", 500)
		return nil
	}
	for _, id := range []string{"entry-1", "entry-2", "entry-1"} {
		r, err := ib.Handle(ctx, inbox.Message{ID: id}, credit)
		if err != nil {
			fmt.Println("handle:", err) // do not acknowledge: the broker delivers it again
			return
		}
		fmt.Println(id, r.Outcome)
	}
	cents, err := client.HGet(ctx, account, "cents").Int()
	fmt.Println("cents", cents, err)
	// Output:
	// entry-1 applied
	// entry-2 applied
	// entry-1 duplicate
	// cents 1000 <nil>
}

// A handler whose effect depends on a value it reads reads it with
// WatchRead: if another client changes the value before EXEC, nothing is
// applied and the inbox runs the transaction again on the new value.
func ExampleTx_WatchRead() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opt, err := redis.ParseURL(os.Getenv("OUTBOX_REDIS_URL"))
	if err != nil {
		fmt.Println("OUTBOX_REDIS_URL:", err)
		return
	}
	client := redis.NewClient(opt)
	defer client.Close()
	prefix := examplePrefix()
	defer deletePrefix(client, prefix)
	store, err := redisinbox.New(client, redisinbox.Options{Prefix: prefix})
	if err != nil {
		fmt.Println("store:", err)
		return
	}
	ib, err := inbox.New(store, inbox.Options{})
	if err != nil {
		fmt.Println("inbox:", err)
		return
	}
	stock := store.Key("stock:sku-7")
	client.Set(ctx, stock, 3, 0)

	// Reserve one item unless the stock is empty.
	reserve := func(ctx context.Context, tx *redisinbox.Tx, m inbox.Message) error {
		var get *redis.StringCmd
		if err := tx.WatchRead(ctx, []string{stock}, func(p redis.Pipeliner) { get = p.Get(ctx, stock) }); err != nil {
			return err
		}
		n, err := get.Int()
		if err != nil {
			return err
		}
		if n == 0 {
			return nil // applied, with no effect: out of stock
		}
		tx.Pipe().Set(ctx, stock, n-1, 0)
		return nil
	}
	for _, id := range []string{"order-1", "order-2", "order-1", "order-3", "order-4"} {
		r, err := ib.Handle(ctx, inbox.Message{ID: id}, reserve)
		if err != nil {
			fmt.Println("handle:", err)
			return
		}
		left, _ := client.Get(ctx, stock).Int()
		fmt.Println(id, r.Outcome, "stock", left)
	}
	// Output:
	// order-1 applied stock 2
	// order-2 applied stock 1
	// order-1 duplicate stock 1
	// order-3 applied stock 0
	// order-4 applied stock 0
}

func examplePrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "example:{inbox-" + hex.EncodeToString(b[:]) + "}"
}
