package amqpsink_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxrelay/outbox"
	"github.com/outboxrelay/outbox/backoff"
	amqpsink "github.com/outboxrelay/outbox/sinks/amqp"
)

// Publishing entries to an exchange named after their topic, with a
// durable queue bound to it. The message's message_id is the entry ID.
func Example() {
	url := os.Getenv("OUTBOX_AMQP_URL") // amqp://guest:guest@127.0.0.1:5672/
	exchange, queue := uniq("orders"), uniq("orders-q")

	// Setup, usually done once by the application that consumes.
	conn, err := amqp.Dial(url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	_ = ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil)
	_, _ = ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-single-active-consumer": true})
	_ = ch.QueueBind(queue, "#", exchange, false, nil)
	defer ch.QueueDelete(queue, false, false, false)
	defer ch.ExchangeDelete(exchange, false, false)

	sink, err := amqpsink.Dial(url, amqpsink.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sink.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := sink.Publish(ctx, []outbox.Entry{
		{ID: "e1", Topic: exchange, Key: "order-1", Payload: []byte("created")},
		{ID: "e2", Topic: exchange, Key: "order-1", Payload: []byte("paid")},
	})
	fmt.Println("errors:", errs)

	for range 2 {
		d, _, _ := ch.Get(queue, true)
		fmt.Println(d.MessageId, d.RoutingKey, string(d.Body), d.Headers["outbox-id"])
	}
	// Output:
	// errors: [<nil> <nil>]
	// e1 order-1 created e1
	// e2 order-1 paid e2
}

// An entry whose message no queue takes (an exchange with no binding for
// its routing key) comes back from the broker and fails permanently: the
// relay parks it, with a reason that says what to configure.
func Example_unroutable() {
	url := os.Getenv("OUTBOX_AMQP_URL")
	exchange := uniq("nobody-listens")
	conn, err := amqp.Dial(url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	_ = ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil)

	sink, err := amqpsink.Dial(url, amqpsink.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sink.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = sink.Publish(ctx, []outbox.Entry{{ID: "e1", Topic: exchange, Key: "order-1"}})[0]
	fmt.Println("class:", backoff.ClassOf(err))
	fmt.Println("unroutable:", errors.Is(err, amqpsink.ErrUnroutable))
	fmt.Println("says what to do:", strings.Contains(err.Error(), "bind a queue to the exchange"))
	// Output:
	// class: permanent
	// unroutable: true
	// says what to do: true
}
