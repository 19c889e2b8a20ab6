package amqpinbox_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox/inbox"
	"github.com/outboxrelay/outbox/sinks/amqp/amqpinbox"
)

// Consume a queue through an inbox: the queue holds one entry twice (a
// relay's re-publish after a lost confirm), and the consumer applies it
// once. It needs a RabbitMQ at OUTBOX_AMQP_URL.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := amqp.Dial(os.Getenv("OUTBOX_AMQP_URL"))
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer conn.Close()
	pub, err := conn.Channel()
	if err != nil {
		fmt.Println("channel:", err)
		return
	}
	queue := "payments-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := pub.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		fmt.Println("queue:", err)
		return
	}
	defer pub.QueueDelete(queue, false, false, false)

	// What amqpsink publishes: message_id = the entry ID, the routing
	// key = the entry's Key (here through the default exchange, whose
	// routing key is the queue), outbox-key-seq when keys are numbered.
	for _, id := range []string{"entry-1", "entry-2", "entry-1", "entry-3"} {
		if err := pub.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{
			MessageId: id, DeliveryMode: amqp.Persistent, Body: []byte(`{"amount": 10}`),
		}); err != nil {
			fmt.Println("publish:", err)
			return
		}
	}

	// The inbox (a PostgreSQL, MySQL or Redis store in a service) and the
	// helper, on a channel of its own.
	ib, err := inbox.New(inbox.NewMemory(), inbox.Options{})
	if err != nil {
		fmt.Println("inbox:", err)
		return
	}
	balance := 0
	applied := make(chan string, 3)
	credit := func(ctx context.Context, tx *inbox.MemoryTx, m inbox.Message) error {
		d := m.Data.(amqp.Delivery) // the delivery, for its body and headers
		tx.OnCommit(func() {
			balance += 10
			applied <- m.ID + " (" + strconv.Itoa(len(d.Body)) + " bytes)"
		})
		return nil
	}
	ch, err := conn.Channel()
	if err != nil {
		fmt.Println("channel:", err)
		return
	}
	c, err := amqpinbox.NewConsumer(ib, credit, ch, queue, amqpinbox.Options{})
	if err != nil {
		fmt.Println("amqpinbox:", err)
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	for range 3 { // entry-3 comes after the copy of entry-1, skipped
		fmt.Println("applied", <-applied)
	}
	stop()
	fmt.Println("run:", <-done)
	fmt.Println("balance", balance)
	// Output:
	// applied entry-1 (14 bytes)
	// applied entry-2 (14 bytes)
	// applied entry-3 (14 bytes)
	// run: <nil>
	// balance 30
}
