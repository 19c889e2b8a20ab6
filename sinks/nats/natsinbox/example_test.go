package natsinbox_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/sinks/nats/natsinbox"
)

// Consume a stream through an inbox: the broker holds a copy of one entry
// (a re-publish outside the stream's duplicate window), and the consumer
// applies it once. It needs a nats-server with JetStream at
// OUTBOX_NATS_URL.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nc, err := nats.Connect(os.Getenv("OUTBOX_NATS_URL"))
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Println("jetstream:", err)
		return
	}
	name := "PAYMENTS_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}})
	if err != nil {
		fmt.Println("stream:", err)
		return
	}
	defer js.DeleteStream(context.Background(), name)

	// What natssink publishes: the entry ID in outbox-id (and
	// Nats-Msg-Id), the key, the key's sequence number.
	for i, id := range []string{"entry-1", "entry-2", "entry-1"} {
		m := nats.NewMsg(name + ".credited")
		m.Header.Set("outbox-id", id)
		m.Header.Set(nats.MsgIdHdr, id+"-copy-"+strconv.Itoa(i)) // a copy the stream keeps
		m.Data = []byte(`{"amount": 10}`)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			fmt.Println("publish:", err)
			return
		}
	}

	// A durable pull consumer with explicit acks, the inbox (a
	// PostgreSQL, MySQL or Redis store in a service) and the helper.
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "payments", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1,
	})
	if err != nil {
		fmt.Println("consumer:", err)
		return
	}
	ib, err := inbox.New(inbox.NewMemory(), inbox.Options{})
	if err != nil {
		fmt.Println("inbox:", err)
		return
	}
	balance := 0
	credit := func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
		msg := m.Data.(jetstream.Msg) // the message, for its subject and body
		tx.OnCommit(func() {
			balance += 10
			fmt.Println("applied", m.ID, "from", msg.Subject()[len(name)+1:])
		})
		return nil
	}
	c, err := natsinbox.NewConsumer(ib, credit, cons, natsinbox.Options{})
	if err != nil {
		fmt.Println("natsinbox:", err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	for { // until the consumer has acknowledged all three messages
		ci, err := cons.Info(ctx)
		if err != nil {
			fmt.Println("info:", err)
			break
		}
		if ci.AckFloor.Stream == 3 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	fmt.Println("run:", <-done)
	fmt.Println("balance", balance)
	// Output:
	// applied entry-1 from credited
	// applied entry-2 from credited
	// run: <nil>
	// balance 20
}
