package kafkainbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/sinks/kafka/kafkainbox"
)

// A consumer group member credits an account once per entry, though the
// relay published one entry twice; the partition's next offset is stored
// with the credits.
func Example() {
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "payments"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	// What the outbox's Kafka sink publishes: the entry ID in header
	// outbox-id, the key's sequence number in outbox-key-seq.
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	rec := func(id, seq, amount string) *kgo.Record {
		return &kgo.Record{Topic: "payments", Key: []byte("acct-1"), Value: []byte(amount), Headers: []kgo.RecordHeader{
			{Key: "outbox-id", Value: []byte(id)}, {Key: "outbox-key-seq", Value: []byte(seq)},
		}}
	}
	err = producer.ProduceSync(ctx, rec("e-1", "1", "10"), rec("e-2", "2", "5"), rec("e-2", "2", "5")).FirstErr()
	if err != nil {
		panic(err)
	}

	store := inbox.NewMemory()
	ib, err := inbox.New(store, inbox.Options{})
	if err != nil {
		panic(err)
	}
	balance := 0
	credit := func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
		r := m.Data.(*kgo.Record)
		var amount int
		if _, err := fmt.Sscan(string(r.Value), &amount); err != nil {
			return err
		}
		tx.OnCommit(func() { balance += amount }) // commits with the inbox record and the offset
		return nil
	}
	consumer, err := kafkainbox.NewConsumer(ib, credit, kafkainbox.Options{Group: "ledger", Topics: []string{"payments"}},
		kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- consumer.Run(runCtx) }()
	for {
		offsets, err := store.Offsets(ctx, "ledger", "payments")
		if err != nil {
			panic(err)
		}
		if offsets[0] == 3 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}
	s := consumer.Stats()
	fmt.Println("balance:", balance)
	fmt.Println("applied:", s.Applied, "duplicates:", s.Duplicates)
	offsets, _ := store.Offsets(ctx, "ledger", "payments")
	fmt.Println("stored next offset of payments[0]:", offsets[0])
	// Output:
	// balance: 15
	// applied: 2 duplicates: 1
	// stored next offset of payments[0]: 3
}
