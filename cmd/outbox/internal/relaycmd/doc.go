// Package relaycmd is outbox relay: the relay process. It relays one
// outbox to the broker --sink-url names (Kafka, NATS JetStream or
// RabbitMQ, through their sinks; relay_sink.go selects it, relay_kafka.go,
// relay_nats.go and relay_amqp.go hold each one's flags) until SIGTERM or
// SIGINT, then drains; serves /metrics (Prometheus), /healthz and /readyz, and the
// dashboard with --ui-addr; and logs when the outbox is held by a move.
package relaycmd
