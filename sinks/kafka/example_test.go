package kafkasink_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backends/memory"
	kafkasink "github.com/outboxrelay/outbox/sinks/kafka"
)

// Relay an outbox's entries to Kafka, then consume them back, dropping
// duplicates by entry ID. The brokers are kfake's, in process on
// 127.0.0.1; give Dial your own seed brokers instead. The outbox is the
// in-memory backend; a service uses pgoutbox or redisoutbox.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		fmt.Println("kfake:", err)
		return
	}
	defer cluster.Close()

	sink, err := kafkasink.Dial(cluster.ListenAddrs(), kafkasink.Options{})
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer sink.Close()

	b := memory.New(memory.Options{Partitions: 4})
	defer b.Close()
	tx := b.Begin()
	err = b.AppendInTx(ctx, tx,
		outbox.Entry{ID: "order-1-created", Topic: "orders", Key: "order-1", Payload: []byte(`{"status":"created"}`)},
		outbox.Entry{ID: "order-1-paid", Topic: "orders", Key: "order-1", Payload: []byte(`{"status":"paid"}`)},
		outbox.Entry{ID: "order-1-shipped", Topic: "orders", Key: "order-1", Payload: []byte(`{"status":"shipped"}`)},
	)
	if err != nil {
		fmt.Println("append:", err)
		return
	}
	if err := tx.Commit(); err != nil {
		fmt.Println("commit:", err)
		return
	}

	relay, err := outbox.NewRelay(b, sink, outbox.RelayOptions{})
	if err != nil {
		fmt.Println("relay:", err)
		return
	}
	if err := relay.Start(ctx); err != nil {
		fmt.Println("start:", err)
		return
	}
	defer func() { _ = relay.Stop(context.Background()) }()

	// A consumer. The records of one key are in one Kafka partition, in
	// append order; the entry ID in each record's header lets a Deduper
	// drop the duplicates at-least-once delivery can bring.
	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		fmt.Println("consumer:", err)
		return
	}
	defer consumer.Close()
	dedup := kafkasink.NewDeduper(1000)
	for n := 0; n < 3; {
		fetches := consumer.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			fmt.Println("consuming:", err)
			return
		}
		if err := fetches.Err0(); err != nil {
			fmt.Println("fetch:", err)
			return
		}
		fetches.EachRecord(func(rec *kgo.Record) {
			if dedup.SeenRecord(rec) {
				return
			}
			n++
			fmt.Printf("%s %s %s %s\n", rec.Topic, rec.Key, kafkasink.EntryID(rec), rec.Value)
		})
	}
	// Output:
	// orders order-1 order-1-created {"status":"created"}
	// orders order-1 order-1-paid {"status":"paid"}
	// orders order-1 order-1-shipped {"status":"shipped"}
}
