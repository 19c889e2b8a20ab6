// Package amqpsink is the outbox sink for RabbitMQ (AMQP 0-9-1, on
// github.com/rabbitmq/amqp091-go): it publishes each entry as a persistent
// message with publisher confirms.
package amqpsink
